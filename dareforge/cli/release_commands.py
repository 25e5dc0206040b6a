"""`dareforge release build | list | verify | publish`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dareforge.cli.app import command, context, out, release_app

PANEL = "Releases and reports"


@command("build", panel=PANEL, group=release_app)
def release_build(
    name: Annotated[str, typer.Argument(help="Release name, e.g. dareforge.")] = "dareforge",
    version: Annotated[
        str | None, typer.Option(help="Explicit version (default: date-based YYYY.MM.DD[.N]).")
    ] = None,
) -> None:
    """Cut a release from the accepted tasks; an unchanged release makes no new version.

    Public part under releases/NAME/VERSION/, answers and references under releases/NAME-private/VERSION/.
    """
    from dareforge.publish.release import build_release

    result = build_release(context(), name, version)
    state = "created" if result.created else "unchanged, no new version"
    out.print(f"release {result.name}@{result.version}: {state}; {len(result.release.task_ids)} tasks")
    for note in result.notes:
        out.print(f"  {note}")
    for reason, count in sorted(result.excluded.items()):
        out.print(f"  left out: {count} ({reason})")


@command("list", panel=PANEL, group=release_app)
def release_list(name: Annotated[str, typer.Argument(help="Release name.")] = "dareforge") -> None:
    """List the finished versions of a release, oldest first."""
    from dareforge.publish.release import list_versions

    for version in list_versions(context(), name):
        out.print(f"{name}@{version}")


@command("verify", panel=PANEL, group=release_app)
def release_verify(
    release: Annotated[str, typer.Argument(help="NAME or NAME@VERSION.")] = "dareforge",
) -> None:
    """Re-hash every file of a release version against its manifests."""
    from dareforge.publish.release import verify_release
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    problems = verify_release(context(), name, version)
    for problem in problems:
        out.print(f"[red]{problem}[/]")
    out.print(f"{release}: {'OK' if not problems else f'{len(problems)} problems'}")
    if problems:
        raise typer.Exit(1)


@command("publish", panel=PANEL, group=release_app)
def release_publish(
    release: Annotated[str, typer.Argument(help="NAME or NAME@VERSION.")] = "dareforge",
    to: Annotated[Path, typer.Option("--to", help="Folder to copy the release into.")] = Path(
        "data/published"
    ),
    hub: Annotated[
        str | None,
        typer.Option(
            help="Hugging Face namespace: push to NAMESPACE/NAME and the private NAMESPACE/NAME-private."
        ),
    ] = None,
    public_only: Annotated[bool, typer.Option(help="Leave the private part (answers) out of --to.")] = False,
) -> None:
    """Publish a finished release version: to a local folder (default) or to the Hugging Face Hub (--hub).

    The Hub gets one tagged commit (vVERSION) per repo, after part commits of at most 64 MiB when the version is
    larger; the answers repo is private; re-publishing an unchanged version makes no commit. The token comes from HF_TOKEN (write access).
    """
    from dareforge.publish.hub import HubTarget
    from dareforge.publish.release import load_release
    from dareforge.publish.targets import LocalTarget
    from dareforge.validators.audit import parse_release

    name, version = parse_release(release)
    target = HubTarget(hub) if hub else LocalTarget(to, include_private=not public_only)
    where = target.publish(load_release(context(), name, version))
    out.print(f"published {release} to {where}")
