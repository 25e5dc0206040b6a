"""Splitting a profiled table in SQL (stratified, chronological, grouped or random) into public train, public
test and private answers, written with COPY so values reach the CSVs exactly as the source wrote them."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd

from dareforge.config import PrepareConfig
from dareforge.generators.profile import (
    column_profile,
)
from dareforge.generators.rawtable import (
    PrepareError,
    RawTable,
)
from dareforge.generators.sql import (
    Column,
    is_datetime,
    seeded_hash,
    sql_ident,
    sql_text,
    timed,
)
from dareforge.hashing import sha256_file
from dareforge.reference_solutions.forecast import clock as clock_of
from dareforge.reference_solutions.forecast import held_out_steps, is_dated
from dareforge.schema import (
    Framing,
    PreparedSource,
    Source,
    SourceFile,
    TaskType,
)

log = logging.getLogger(__name__)


ROW_ID = "row_id"


FILES = ("train.csv", "test.csv", "answers.csv")


class SplitMixin:
    """Splitting a profiled table into train, test and answers, and writing them with COPY. Mixed into `Engine`, whose connection (`self.con`) it uses."""

    def _prepare_loaded(
        self,
        source: Source,
        override: Any,
        table: RawTable,
        version: str,
        scratch: Path,
        columns: list[Column],
        framing: Framing,
    ) -> PreparedSource:
        sid, cfg, con = source.id, self.cfg, self.con
        by_name = {c.name.strip(): c for c in columns} | {c.name: c for c in columns}
        shown = ", ".join(c.name for c in columns[:30]) + (", ..." if len(columns) > 30 else "")
        where = f"of {table.file.name} (columns: {shown})"

        def column(name: str | None, setting: str) -> Column | None:
            if name is None:
                return None
            if name not in by_name:
                raise PrepareError(
                    f"{sid}: sources.{sid}.{setting} names {name!r}, which is not a column {where}"
                )
            return by_name[name]

        wanted = (override.target if override and override.target else None) or source.target_columns
        targets = []
        for name in wanted:
            if name not in by_name:
                raise PrepareError(
                    f"{sid}: target {name!r} is not a column {where}; fix sources.{sid}.target or sources.{sid}.table"
                )
            targets.append(by_name[name])
        n_all = self._scalar("SELECT count(*) FROM src")
        # A number to predict must read as one: a censored "<10" or a "?" is no label for a regression. A
        # class of blanks is none either: answers files are read with their spaces stripped.
        numeric = framing.task_type in (TaskType.REGRESSION, TaskType.TIME_SERIES)
        labelled = " AND ".join(
            f"isfinite(TRY_CAST({t.text} AS DOUBLE))" if numeric else f"trim({t.text}) <> ''" for t in targets
        )

        # The id: the override, the source's own, a unique column named like an id, else the row number.
        id_col = column(override.id_column if override else None, "id_column")
        if id_col is not None and not self._unique(id_col, labelled):
            raise PrepareError(
                f"{sid}: sources.{sid}.id_column {id_col.name!r} is not unique among the labelled rows; "
                f"name a unique column or remove the setting to number the rows"
            )
        if id_col is None:
            with timed(sid, "find id"):
                id_col = self._find_id(
                    source,
                    columns,
                    by_name,
                    labelled,
                    {t.name for t in targets},
                    set(framing.excluded_columns),
                )
        synthetic = id_col is None
        if synthetic:
            row_id = ROW_ID if ROW_ID not in by_name else f"__{ROW_ID}"
            id_col = Column(row_id, "BIGINT", "BIGINT")
            # Numbered in hash order, not file order: files are often sorted by the label, and an id (or a
            # test file sorted by it) that follows the file order would give the answers away.
            row_hash = seeded_hash(self.ctx.config.prepare.seed, "CAST(rowid AS VARCHAR)")
            con.execute(
                f"CREATE OR REPLACE TABLE lab_numbered AS SELECT rowid AS __rid, "
                f"row_number() OVER (ORDER BY {row_hash}, rowid) AS {sql_ident(row_id)}, * FROM src WHERE {labelled}"
            )
            con.execute("CREATE OR REPLACE VIEW lab_all AS SELECT * FROM lab_numbered")
        else:
            con.execute(
                f"CREATE OR REPLACE VIEW lab_all AS SELECT rowid AS __rid, * FROM src WHERE {labelled}"
            )
        con.execute("CREATE OR REPLACE VIEW lab AS SELECT * FROM lab_all")

        n = self._scalar("SELECT count(*) FROM lab")
        if n == 0:
            names = ", ".join(t.name for t in targets)
            raise PrepareError(
                f"{sid}: target {names} is empty in every row of {table.file.name}; name the right column under "
                f"sources.{sid}.target (or the labelled file under sources.{sid}.table)"
            )
        if n < n_all:
            log.info("%s: dropped %d of %d rows whose target is missing", sid, n_all - n, n_all)
        with timed(sid, "profile"):
            stats = self._profile("lab", columns, n, {t.name for t in targets})
        profiled = n  # the time-series filter below may drop rows without a time; the profile keeps them

        task_type = self._task_type(source, override, targets, stats)
        entity = column(
            override.entity_column if override and override.entity_column else None, "entity_column"
        )
        if entity is None and source.entity_column in by_name:
            entity = by_name[source.entity_column]
        group = column(override.group_column if override else None, "group_column")
        clock = column(override.time_column if override and override.time_column else None, "time_column")
        if clock is None and source.time_column in by_name:
            clock = by_name[source.time_column]
        if clock is None and task_type == TaskType.TIME_SERIES:
            clock = next((c for c in columns if is_datetime(c.dtype)), None)
            if clock is None:
                raise PrepareError(
                    f"{sid}: a time series needs a time column and none {where} holds dates; "
                    f"name it under sources.{sid}.time_column"
                )

        # The private split, in SQL: a narrow table of the held-out rows' positions (`__rid`). Rows indexed by
        # time are split in time even for a tabular framing: a random split lets the date interpolate the answer.
        in_time = task_type == TaskType.TIME_SERIES or (
            framing.split == "chronological" and clock is not None
        )
        if in_time:
            assert clock is not None
            split = "chronological"
            con.execute(
                f"CREATE OR REPLACE VIEW lab AS SELECT * FROM lab_all WHERE {clock.typed} IS NOT NULL"
            )
            n = self._scalar("SELECT count(*) FROM lab")
            if n < profiled:
                log.info("%s: dropped %d rows without a time in %s", sid, profiled - n, clock.name)
            if task_type == TaskType.TIME_SERIES:
                # A forecast holds out its latest distinct times, in whole seasons (`forecast.held_out_steps`).
                times = pd.Series(
                    [t for (t,) in self.con.execute(f"SELECT DISTINCT {clock.typed} FROM lab").fetchall()]
                )
                steps = held_out_steps(clock_of(times), cfg.test_share, is_dated(times))
                cutoff = (
                    f"(SELECT DISTINCT {clock.typed} AS __t FROM lab ORDER BY __t DESC LIMIT 1 "
                    f"OFFSET {max(steps - 1, 0)})"
                )
                held_out = f"SELECT __rid FROM lab WHERE {clock.typed} >= {cutoff}"
            else:
                # The (1 - test_share) quantile of time, exactly, with a top-N heap of test_share * n values.
                above = n - 1 - math.floor((n - 1) * (1 - cfg.test_share)) if n else 0
                cutoff = f"(SELECT {clock.typed} AS __t FROM lab ORDER BY __t DESC LIMIT 1 OFFSET {above})"
                held_out = f"SELECT __rid FROM lab WHERE {clock.typed} > {cutoff}"
        elif group is not None:
            split = "grouped"
            key = f"coalesce({group.text}, '')"
            goal = round(n * cfg.test_share)
            # Groups in hash order join the test set until it holds its share; the last group stays in train.
            held_out = f"""
                WITH __g AS (SELECT {key} AS __k, count(*) AS __size FROM lab GROUP BY 1),
                __o AS (
                    SELECT __k,
                        coalesce(sum(__size) OVER (ORDER BY {seeded_hash(cfg.seed, "__k")}, __k
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS __before,
                        row_number() OVER (ORDER BY {seeded_hash(cfg.seed, "__k")} DESC, __k DESC) AS __from_end
                    FROM __g
                )
                SELECT __rid FROM lab
                WHERE {key} IN (SELECT __k FROM __o WHERE __before < {goal} AND __from_end > 1)"""
        else:
            split = "stratified" if task_type == TaskType.CLASSIFICATION else "random"
            held_out = _drawn_held_out(split, targets, id_col, cfg)
        with timed(sid, "split"):
            con.execute(f"CREATE OR REPLACE TABLE held_out AS {held_out}")
        n_rows, n_test = n, self._scalar("SELECT count(*) FROM held_out")
        if n_test == 0 and split == "stratified" and framing.questions_only:
            # A question's table is split only to keep some rows private; on a small table whose every class
            # is too small to give a row, a random draw still does (a classification framing would fail here).
            split = "random"
            con.execute(f"CREATE OR REPLACE TABLE held_out AS {_drawn_held_out(split, targets, id_col, cfg)}")
            n_test = self._scalar("SELECT count(*) FROM held_out")
        if n_test == 0 or n_test == n_rows:
            side = "test" if n_test == 0 else "train"
            raise PrepareError(
                f"{sid}: the {split} split leaves the {side} set empty ({n_rows} labelled rows, "
                f"prepare.test_share={cfg.test_share}); the source has too few rows, classes, groups or time "
                f"points to split — exclude it (rules.excluded_ids) or change sources.{sid}.group_column/time_column"
            )

        # The files, each sorted so the same input always gives the same bytes.
        target_names = [t.name for t in targets]
        all_names = ([id_col.name] if synthetic else []) + [c.name for c in columns]
        key_names = [id_col.name] + ([clock.name] if task_type == TaskType.TIME_SERIES and clock else [])
        if task_type == TaskType.TIME_SERIES and entity is not None:
            key_names.append(entity.name)
        answer_names = list(dict.fromkeys(key_names + target_names))
        if task_type == TaskType.TIME_SERIES:
            assert clock is not None
            order = [clock.typed] + ([entity.text] if entity else []) + [id_col.typed, id_col.text]
        else:
            order = [id_col.typed, id_col.text]
        order_sql = ", ".join(order)
        outputs = {
            "train.csv": (all_names, "NOT IN", n_rows - n_test),
            "test.csv": ([c for c in all_names if c not in target_names], "IN", n_test),
            "answers.csv": (answer_names, "IN", n_test),
        }
        spelled = self._spelled(columns, all_names)
        files = []
        for name, (names, condition, rows) in outputs.items():
            path = scratch / name
            with timed(sid, f"write {name}"):
                selected = ", ".join(spelled.get(n, sql_ident(n)) for n in names)
                con.execute(
                    f"COPY (SELECT {selected} FROM lab WHERE __rid {condition} "
                    f"(SELECT __rid FROM held_out) ORDER BY {order_sql}) "
                    f"TO {sql_text(str(path))} (FORMAT csv, HEADER true, DELIMITER ',')"
                )
                digest = sha256_file(path)
            files.append(
                SourceFile(
                    name=name,
                    size=path.stat().st_size,
                    sha256=digest,
                    encoding="utf-8",
                    columns=names,
                    rows=rows,
                )
            )
        profiles = [column_profile(c, stats[c.name], profiled) for c in columns]
        return PreparedSource(
            source_id=sid,
            source_version=source.version,
            framing=framing.framing,
            questions_only=framing.questions_only,
            forecast_from_time=framing.forecast_from_time,
            excluded_columns=[c for c in framing.excluded_columns if c in by_name],
            version=version,
            task_type=task_type,
            target_columns=target_names,
            id_column=id_col.name,
            time_column=clock.name if clock else None,
            entity_column=entity.name if entity else None,
            group_column=group.name if group else None,
            columns=profiles,
            n_rows=n_rows,
            n_train=n_rows - n_test,
            n_test=n_test,
            split=split,
            seed=cfg.seed,
            files=files,
        )

    def _spelled(self, columns: list[Column], names: list[str]) -> dict[str, str]:
        """SELECT expressions for the columns of `names` that hold booleans (every value true or false, in any
        case, as `TRUE`, `true` or a Parquet BOOLEAN): written `True` and `False`, as pandas writes a boolean
        column, so a prepared file and an agent's predictions spell a boolean one way."""
        by_name = {c.name: c for c in columns}
        candidates = [by_name[n] for n in names if n in by_name]
        if not candidates:
            return {}
        tests = ", ".join(
            f"count({c.text}) > 0 AND bool_and({c.text} IS NULL OR lower(trim({c.text})) IN ('true', 'false'))"
            for c in candidates
        )
        found = self.con.execute(f"SELECT {tests} FROM lab").fetchone()
        return {
            c.name: (
                f"CASE lower(trim({c.text})) WHEN 'true' THEN 'True' WHEN 'false' THEN 'False' END "
                f"AS {sql_ident(c.name)}"
            )
            for c, boolean in zip(candidates, found, strict=True)
            if boolean
        }


def _drawn_held_out(split: str, targets: list[Column], id_col: Column, cfg: PrepareConfig) -> str:
    """The held-out rows of a `stratified` or `random` split, in SQL over the view `lab`: within each class
    (one class when random), rows in hash order; the first round(share * class size) are held out, so every
    class keeps its share (a class of one row stays in train; a random split holds out at least one row)."""
    stratified = split == "stratified"
    strata = " || chr(31) || ".join(t.text for t in targets) if stratified else "''"
    share = f"round(__m * {cfg.test_share!r})"
    if not stratified:
        share = f"greatest(1, {share})"
    order = f"{seeded_hash(cfg.seed, id_col.text)}, __rid"
    return f"""
                SELECT __rid FROM (
                    SELECT __rid,
                        row_number() OVER (PARTITION BY {strata} ORDER BY {order}) AS __r,
                        count(*) OVER (PARTITION BY {strata}) AS __m
                    FROM lab
                ) WHERE __m > 1 AND __r <= least(__m - 1, {share})"""
