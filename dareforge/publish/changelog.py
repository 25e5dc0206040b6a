"""What changed between two release versions.

Task ids hash everything that defines a task (source version, prepare config, family, spec, seed), so a
regenerated task usually gets a new id and "same id" cannot be the test for "changed". A task's **slot** is
(source id, family, seed): the place it fills in the benchmark; a slot can hold several tasks (a source's
framings, or its questions, share a seed), which `diff` pairs by id. Between two versions:

- added: a slot only the new version has;
- removed: a slot only the old version has;
- changed: a slot both have, holding a different task id (the source, prepare config or generator changed),
  or the same id whose files differ (e.g. IF reference predictions regenerated on another library stack), or
  the same task on another split side.

Apart from the diff, the changelog names every task a people's review keeps out of the version, with the
reviewer's reason (the review reasons of the gate's verdicts; see `dareforge.reviews`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dareforge.reviews import CHECK
from dareforge.schema import Task, Verdict

Slot = tuple[str, str, int]


def slot(task: dict[str, Any]) -> Slot:
    return (task["source_id"], task["family"], int(task["seed"]))


@dataclass
class Change:
    slot: Slot
    before: dict[str, Any]
    after: dict[str, Any]
    what: list[str]


@dataclass
class Diff:
    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)
    unchanged: int = 0

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def summary(self) -> dict[str, Any]:
        return {
            "added": sorted(t["id"] for t in self.added),
            "removed": sorted(t["id"] for t in self.removed),
            "changed": [{"from": c.before["id"], "to": c.after["id"], "what": c.what} for c in self.changed],
            "unchanged": self.unchanged,
        }


def _what_changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    what = []
    for key, label in (
        ("source_version", "source data"),
        ("prepared_version", "prepared split"),
        ("generator_version", "generator"),
    ):
        if before.get(key) != after.get(key):
            what.append(f"{label} {before.get(key)} -> {after.get(key)}")
    if before["id"] != after["id"] and not what:
        what.append("task definition")
    for side in ("public_files", "private_files"):
        old, new = before.get(side) or {}, after.get(side) or {}
        differ = sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))
        if differ and before["id"] == after["id"]:
            what.append(f"{side.split('_')[0]} files differ: {', '.join(differ)}")
    if before.get("split") != after.get("split"):
        what.append(f"split {before.get('split')} -> {after.get('split')}")
    return what


def diff(before: list[dict[str, Any]] | None, after: list[dict[str, Any]]) -> Diff:
    """Compare task entries (id, source_id, family, seed, split, versions, {name: sha256} file maps).

    A slot may hold several tasks (a source's framings, or its questions, share a seed): within a slot the
    same id pairs with itself first, then the remaining tasks pair in id order; what is left over on one side
    is added or removed. So no task is ever lost from the diff."""
    old, new = _by_slot(before or []), _by_slot(after)
    result = Diff()
    for key in sorted(old.keys() | new.keys()):
        was, now = old.get(key, {}), new.get(key, {})
        pairs = [(was[i], now[i]) for i in sorted(was.keys() & now.keys())]
        gone = [was[i] for i in sorted(was.keys() - now.keys())]
        came = [now[i] for i in sorted(now.keys() - was.keys())]
        pairs += zip(gone, came, strict=False)
        result.removed += gone[len(came) :]
        result.added += came[len(gone) :]
        for b, a in pairs:
            what = _what_changed(b, a)
            if what:
                result.changed.append(Change(key, b, a, what))
            else:
                result.unchanged += 1
    return result


def _by_slot(tasks: list[dict[str, Any]]) -> dict[Slot, dict[str, dict[str, Any]]]:
    """slot -> task id -> task entry."""
    slots: dict[Slot, dict[str, dict[str, Any]]] = {}
    for t in tasks:
        slots.setdefault(slot(t), {})[t["id"]] = t
    return slots


def review_reasons(reasons: Iterable[str]) -> list[str]:
    return [r for r in reasons if r.startswith(f"{CHECK}:")]


def among(verdicts: Iterable[Verdict], tasks: Iterable[Task]) -> list[Verdict]:
    """The verdicts of `tasks` (a release's candidates), so the changelog names only tasks it could hold."""
    ids = {t.id for t in tasks}
    return [v for v in verdicts if v.task_id in ids]


def exclusion(reasons: list[str]) -> str:
    """The release's `excluded` label of a rejected task: a review's, or the checks'."""
    return "kept out by a review" if review_reasons(reasons) else "rejected by the validation gate"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render(
    name: str, version: str, previous: str | None, result: Diff, verdicts: Iterable[Verdict] = ()
) -> str:
    lines = [f"# Changelog of {name} {version}", ""]
    if previous is None:
        lines += [f"First version: {len(result.added)} tasks.", ""]
    else:
        lines += [
            f"Compared with {previous}: {len(result.added)} added, {len(result.removed)} removed, "
            f"{len(result.changed)} changed, {result.unchanged} unchanged.",
            "",
            "A task's slot is (source, family, seed). *Changed* means the slot holds a new task id (its source, "
            "prepared split or generator changed), or the same task with different files or on another side "
            "of the split.",
            "",
        ]
    for title, rows in (("Added", result.added), ("Removed", result.removed)):
        if not rows:
            continue
        lines += [
            f"## {title} ({len(rows)})",
            "",
            "| task | family | source | seed | split |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{t['id']}` | {t['family']} | {_cell(t['source_id'])} | {t['seed']} | {t.get('split', '')} |"
            for t in rows
        ]
        lines.append("")
    if result.changed:
        lines += [
            f"## Changed ({len(result.changed)})",
            "",
            "| source | family | seed | was | now | what changed |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {_cell(c.slot[0])} | {c.slot[1]} | {c.slot[2]} | `{c.before['id']}` | `{c.after['id']}` "
            f"| {_cell('; '.join(c.what))} |"
            for c in result.changed
        ]
        lines.append("")
    reviewed = sorted((v.task_id, v.family, said) for v in verdicts if (said := review_reasons(v.reasons)))
    if reviewed:
        lines += [
            f"## Kept out by reviews ({len(reviewed)})",
            "",
            "| task | family | review |",
            "|---|---|---|",
        ]
        lines += [f"| `{t}` | {family} | {_cell('; '.join(said))} |" for t, family, said in reviewed]
        lines.append("")
    return "\n".join(lines)
