"""What a profiled table is: its id column (a unique column, by name first), and the task type of a target."""

from __future__ import annotations

import logging
import re
from contextlib import suppress
from typing import Any

from dareforge.generators.profile import (
    EXACT_DISTINCT_ROWS,
    Stats,
)
from dareforge.generators.rawtable import (
    PrepareError,
)
from dareforge.generators.sql import (
    Column,
    is_numeric,
    sql_ident,
)
from dareforge.schema import (
    Source,
    TaskType,
)

log = logging.getLogger(__name__)


ID_NAME = r"(?i)^id$|[ _.-]id$|(?-i:[a-z0-9](Id|ID))$"


class InferMixin:
    """What a profiled table is: a unique id column, the task type of a target. Mixed into `Engine`, whose connection (`self.con`) it uses."""

    def _unique(self, col: Column, labelled: str) -> bool:
        """Every labelled row has a value and no value repeats (a grouped query, so it spills when large)."""
        nulls = self._scalar(f"SELECT count(*) FROM src WHERE {labelled} AND {sql_ident(col.name)} IS NULL")
        if nulls:
            return False
        dupes = self._scalar(
            f"SELECT count(*) FROM (SELECT {col.text} AS __v FROM src WHERE {labelled} "
            f"GROUP BY 1 HAVING count(*) > 1 LIMIT 1)"
        )
        return dupes == 0

    def _find_id(
        self,
        source: Source,
        columns: list[Column],
        by_name: dict[str, Column],
        labelled: str,
        targets: set[str],
        excluded: set[str],
    ) -> Column | None:
        candidates = []
        if source.id_column in by_name:
            candidates.append(by_name[source.id_column])
        # Columns the framing leaves out (a row number in file order) are never the id.
        candidates += [
            c
            for c in columns
            if re.search(ID_NAME, c.name.strip()) and c not in candidates and c.name not in excluded
        ]
        for col in candidates:
            if col.name in targets:
                continue
            if self._unique(col, labelled):
                return col
            log.info("%s: %s looks like an id but is not unique; not using it", source.id, col.name)
        return None

    def _task_type(
        self, source: Source, override: Any, targets: list[Column], stats: dict[str, Stats]
    ) -> TaskType:
        sid = source.id
        if override and override.task_type:
            try:
                return TaskType(override.task_type)
            except ValueError as exc:
                raise PrepareError(
                    f"{sid}: sources.{sid}.task_type is {override.task_type!r}; choose one of "
                    f"{', '.join(t.value for t in TaskType)}"
                ) from exc
        if source.task_hint:
            with suppress(ValueError):
                return TaskType(source.task_hint)
        for target in targets:
            s = stats[target.name]
            if not is_numeric(target.dtype):
                continue
            if not s.integral:
                return TaskType.REGRESSION
            distinct = s.distinct
            if s.nonnull > EXACT_DISTINCT_ROWS and distinct <= 4 * self.cfg.max_classes:
                distinct = self._scalar(f"SELECT count(DISTINCT {target.typed}) FROM lab")
            if distinct > self.cfg.max_classes:
                return TaskType.REGRESSION
        return TaskType.CLASSIFICATION
