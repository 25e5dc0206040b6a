"""The embedded default catalog's declarations: real tables that ship inside installed Python packages.

scikit-learn's bundled `load_*` sets, statsmodels' `datasets` modules and vega_datasets' local files all live
in site-packages, so a crawl with no network and no credentials still has real classification, regression and
time-series sources. Only loaders that read package files are used; anything that downloads is left out.
Descriptions and license notes come from the packages themselves where they carry them.

The catalog is pure declarations: listing it imports none of those packages (scikit-learn alone takes seconds
to import). The crawler that lists and downloads it is `dareforge.crawlers.builtin`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

CATALOG_FORMAT = 2
"""Bump when a loader's output or the download's discovered fields change, so every builtin source is
re-downloaded. 2: title, description and license moved from the listing to the download."""

Reshape = Callable[["pd.DataFrame"], "pd.DataFrame"]
Description = dict[str, str]
"""What `describe()` returns: the package's own `title`, `description` and `license` for the dataset."""


@dataclass(frozen=True)
class BuiltinDataset:
    """One catalog entry: where the table comes from and what the task is, plus two lazy readers.

    `load` returns the frame and `describe` the package's title, description and license; both import the
    data package, so neither runs while listing.
    """

    key: str
    package: str
    dataset: str
    load: Callable[[], pd.DataFrame]
    describe: Callable[[], Description]
    target_columns: tuple[str, ...]
    task_hint: str | None
    time_column: str | None = None
    entity_column: str | None = None


def _package_license(package: str) -> str:
    meta = metadata(package)
    return meta.get("License-Expression") or meta.get("License") or "license not stated"


def _sklearn(name: str, target: str, task: str, *, upstream: str) -> BuiltinDataset:
    def loader() -> Callable[..., Any]:
        from sklearn import datasets

        return getattr(datasets, f"load_{name}")

    def load() -> pd.DataFrame:
        bunch = loader()(as_frame=True)
        frame = bunch.frame.rename(columns={"target": target})
        if "target_names" in bunch:
            frame[target] = bunch.target_names[bunch.target.to_numpy()]
        return frame

    def describe() -> Description:
        # DESCR is reStructuredText: an anchor line, the title and its underline, then the text; the collapsed
        # references block at the end is markup noise in a plain description.
        _anchor, text = loader()().DESCR.split(".. dropdown::")[0].split(":\n", 1)
        title, _underline, description = text.strip().split("\n", 2)
        return {
            "title": title.strip(),
            "description": description.strip(),
            "license": (
                f"Distributed with scikit-learn ({_package_license('scikit-learn')}). Upstream: {upstream}"
            ),
        }

    return BuiltinDataset(
        key=f"sklearn-{name.replace('_', '-')}",
        package="scikit-learn",
        dataset=name,
        load=load,
        describe=describe,
        target_columns=(target,),
        task_hint=task,
    )


def _statsmodels(
    name: str,
    target: str,
    task: str,
    *,
    reshape: Reshape | None = None,
    reshape_note: str = "",
    time: str | None = None,
    entity: str | None = None,
) -> BuiltinDataset:
    def module() -> Any:
        import importlib

        return importlib.import_module(f"statsmodels.datasets.{name}")

    def load() -> pd.DataFrame:
        import pandas as pd

        frame = module().load_pandas().data
        if not isinstance(frame.index, pd.RangeIndex):
            # Some sets keep their key (dates, state names) in the index; a CSV needs it as a column.
            frame = frame.rename_axis(frame.index.name or "date").reset_index()
        return reshape(frame) if reshape else frame

    def describe() -> Description:
        import textwrap

        mod = module()
        variables = textwrap.dedent(mod.NOTE.strip().removeprefix("::")).strip()
        summary = mod.DESCRLONG.strip() or mod.DESCRSHORT.strip()
        parts = (summary, variables, f"Source: {mod.SOURCE.strip()}", reshape_note)
        return {
            "title": mod.TITLE.strip(),
            "description": "\n\n".join(part for part in parts if part),
            "license": (
                f"{' '.join(mod.COPYRIGHT.split())} (statsmodels' notice for this dataset; "
                f"distributed with statsmodels, {_package_license('statsmodels')})"
            ),
        }

    return BuiltinDataset(
        key=f"statsmodels-{name.replace('_', '-')}",
        package="statsmodels",
        dataset=name,
        load=load,
        describe=describe,
        target_columns=(target,),
        task_hint=task,
        time_column=time,
        entity_column=entity,
    )


def _vega(
    name: str,
    target: str | None,
    task: str | None,
    *,
    title: str,
    upstream: str,
    dates: tuple[str, ...] = (),
    reshape: Reshape | None = None,
    time: str | None = None,
    entity: str | None = None,
) -> BuiltinDataset:
    def dataset() -> Any:
        from vega_datasets import local_data

        return getattr(local_data, name.replace("-", "_"))

    def load() -> pd.DataFrame:
        import json
        from io import BytesIO

        import pandas as pd

        # Parse the bundled file ourselves: the package's own reader passes pandas a deprecated keyword for some
        # sets (a warning on every load) and guesses date columns by name.
        data = dataset()
        raw = data.raw(use_local=True)
        frame = pd.DataFrame(json.loads(raw)) if data.format == "json" else pd.read_csv(BytesIO(raw))
        for column in dates:
            frame[column] = pd.to_datetime(frame[column])
        return reshape(frame) if reshape else frame

    def describe() -> Description:
        data = dataset()
        references = "\n".join(f"[{i}] {ref}" for i, ref in enumerate(data.references or [], start=1))
        return {
            "title": title,
            "description": "\n\n".join(part for part in (data.description or "", references) if part),
            "license": (
                f"Distributed with vega_datasets ({_package_license('vega_datasets')}), from the vega-datasets "
                f"collection. Upstream: {upstream}"
            ),
        }

    return BuiltinDataset(
        key=f"vega-{name}",
        package="vega_datasets",
        dataset=name,
        load=load,
        describe=describe,
        target_columns=(target,) if target else (),
        task_hint=task,
        time_column=time,
        entity_column=entity,
    )


def _month_start(years: pd.Series, months: pd.Series) -> pd.Series:
    import pandas as pd

    return pd.to_datetime(pd.DataFrame({"year": years.astype(int), "month": months.astype(int), "day": 1}))


def _quarterly_date(frame: pd.DataFrame) -> pd.DataFrame:
    """Replace float `year` and `quarter` columns with the quarter's first day."""
    dated = frame.drop(columns=["year", "quarter"])
    dated.insert(0, "date", _month_start(frame["year"], (frame["quarter"] - 1) * 3 + 1))
    return dated


def _monthly_long(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per month from a year-by-month grid (a YEAR column, then twelve month columns)."""
    month_numbers = {name: number for number, name in enumerate(frame.columns[1:], start=1)}
    long = frame.melt(id_vars="YEAR", var_name="month", value_name="temperature")
    long.insert(0, "date", _month_start(long["YEAR"], long["month"].map(month_numbers)))
    return long.sort_values("date", ignore_index=True)[["date", "temperature"]]


def _int_years(column: str) -> Reshape:
    # statsmodels hands years back as floats and vega's wheat as strings; a CSV should hold plain integers.
    return lambda frame: frame.astype({column: int})


UCI = "UCI Machine Learning Repository, CC BY 4.0"
NOAA = "NOAA weather data, public domain"


@cache
def catalog() -> dict[str, BuiltinDataset]:
    """Every builtin dataset by key: declarations only, so building it imports none of the data packages."""
    entries = [
        _sklearn("iris", "species", "classification", upstream=f"Fisher (1936) via the {UCI}"),
        _sklearn("wine", "class", "classification", upstream=f"{UCI} (Wine)"),
        _sklearn("breast_cancer", "diagnosis", "classification", upstream=f"{UCI} (Breast Cancer Wisconsin)"),
        _sklearn("digits", "digit", "classification", upstream=f"{UCI} (Optical Recognition of Digits)"),
        _sklearn(
            "diabetes",
            "disease_progression",
            "regression",
            upstream="Efron et al. (2004), https://www4.stat.ncsu.edu/~boos/var.select/diabetes.html; no license stated",
        ),
        _statsmodels("co2", "co2", "time-series", time="date"),
        _statsmodels("sunspots", "SUNACTIVITY", "time-series", time="YEAR", reshape=_int_years("YEAR")),
        _statsmodels("nile", "volume", "time-series", time="year", reshape=_int_years("year")),
        _statsmodels(
            "macrodata",
            "realgdp",
            "time-series",
            time="date",
            reshape=_quarterly_date,
            reshape_note="Here `year` and `quarter` are replaced by `date`, the first day of the quarter.",
        ),
        _statsmodels(
            "elnino",
            "temperature",
            "time-series",
            time="date",
            reshape=_monthly_long,
            reshape_note="Here the year-by-month grid is reshaped to one row per month: `date`, `temperature`.",
        ),
        _statsmodels(
            "elec_equip",
            "turnover_index",
            "time-series",
            time="date",
            reshape=lambda frame: frame.set_axis(["date", "turnover_index"], axis="columns"),
            reshape_note="Here the series column is named `turnover_index`.",
        ),
        _statsmodels("danish_data", "lrm", "time-series", time="period"),
        _statsmodels(
            "grunfeld", "invest", "regression", time="year", entity="firm", reshape=_int_years("year")
        ),
        _statsmodels("fair", "affairs", "regression"),
        _statsmodels("randhie", "mdvis", "regression"),
        _statsmodels("engel", "foodexp", "regression"),
        _statsmodels("statecrime", "murder", "regression", entity="state"),
        _statsmodels(
            "anes96",
            "vote",
            "classification",
            reshape=lambda frame: frame.assign(vote=frame["vote"].map({0.0: "Clinton", 1.0: "Dole"})),
        ),
        _vega(
            "cars",
            "Miles_per_Gallon",
            "regression",
            title="Cars (auto MPG)",
            upstream="StatLib, http://lib.stat.cmu.edu/datasets/; no license stated",
            dates=("Year",),
        ),
        _vega(
            "seattle-weather",
            "weather",
            "classification",
            title="Seattle daily weather 2012-2015",
            upstream=NOAA,
            dates=("date",),
            time="date",
        ),
        _vega(
            "stocks",
            "price",
            "time-series",
            title="Monthly stock prices 2000-2010",
            upstream="not documented by the package",
            dates=("date",),
            time="date",
            entity="symbol",
        ),
        _vega(
            "iowa-electricity",
            "net_generation",
            "time-series",
            title="Iowa electricity net generation by source",
            upstream="U.S. Energy Information Administration, public domain",
            dates=("year",),
            time="year",
            entity="source",
        ),
        _vega(
            "us-employment",
            "nonfarm",
            "time-series",
            title="US employment by industry 2006-2015",
            upstream="U.S. Bureau of Labor Statistics, Current Employment Statistics",
            dates=("month",),
            time="month",
        ),
        _vega(
            "seattle-temps",
            "temp",
            "time-series",
            title="Seattle hourly temperatures 2010",
            upstream=NOAA,
            dates=("date",),
            time="date",
        ),
        _vega(
            "sf-temps",
            "temp",
            "time-series",
            title="San Francisco hourly temperatures 2010",
            upstream=NOAA,
            dates=("date",),
            time="date",
        ),
        _vega(
            "barley",
            "yield",
            "regression",
            title="Barley yields (Immer 1934)",
            upstream="Immer et al. (1934), as published by Fisher (1947) and Cleveland (1993)",
        ),
        _vega(
            "driving",
            "gas",
            "time-series",
            title="Miles driven per capita and gas prices 1956-2010",
            upstream="New York Times, 'Driving Shifts Into Reverse' (2010), via protovis; no license stated",
            # `side` only places labels in the original chart; it carries no data.
            reshape=lambda frame: frame.drop(columns="side"),
            time="year",
        ),
        _vega(
            "wheat",
            "wheat",
            "time-series",
            title="Playfair's wheat prices and wages",
            upstream="William Playfair (1822), digitised by Mike Bostock, public domain",
            reshape=_int_years("year"),
            time="year",
        ),
        # Real tables that are not task material: the rule filter drops them, and says why.
        _statsmodels("longley", "TOTEMP", "regression", time="YEAR", reshape=_int_years("YEAR")),
        _statsmodels("stackloss", "STACKLOSS", "regression"),
        _vega(
            "airports",
            None,
            None,
            title="US airports (a reference table with no prediction target)",
            upstream="FAA via the vega-datasets collection; no license stated",
        ),
    ]
    return {entry.key: entry for entry in entries}
