"""Tables that arrive as documents: Excel workbooks and JSON records, read with the libraries made for them
(openpyxl through pandas, the json module) into CSV files beside the document, so every later stage reads them
as it reads any table. The document itself is kept as downloaded; each derived table is named after it
(`tourism.xlsx.Data.csv` for the sheet `Data`, `flats.json.csv`), and each document gets a note saying what was
made of it, or why nothing was (which file, and the fix).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from dareforge.describe import NOT_READ

WORKBOOKS = (".xlsx", ".xlsm")
JSON_DOCUMENTS = (".json", ".jsonl", ".ndjson")
MAX_DOCUMENT_BYTES = 200 * 1024**2
"""A document is read whole into memory; larger ones are refused with the reason (export them as CSV)."""
MIN_COLUMNS = 2


def is_document(name: str) -> bool:
    return Path(name).suffix.lower() in (*WORKBOOKS, ".xls", *JSON_DOCUMENTS)


def derived_names(document: str, names: list[str]) -> list[str]:
    """The tables made from `document` among `names`."""
    return [n for n in names if n != document and n.startswith(f"{document}.") and n.endswith(".csv")]


def tabulate(root: Path, names: list[str]) -> dict[str, str]:
    """Write the tables of every document among `names` (paths relative to `root`) beside it; returns a note per
    document: what was made of it, or why nothing was."""
    notes = {}
    taken = set(names)
    for name in sorted(n for n in names if is_document(n)):
        path = root / name
        try:
            if path.stat().st_size > MAX_DOCUMENT_BYTES:
                raise _Unreadable(
                    f"{path.stat().st_size:,} bytes, over the {MAX_DOCUMENT_BYTES:,} read whole into memory; "
                    "export it as CSV at the source"
                )
            tables = _workbook(path) if path.suffix.lower() in (*WORKBOOKS, ".xls") else _json(path)
        except _Unreadable as exc:
            notes[name] = f"{NOT_READ}: {exc}"
            continue
        written = []
        for part, frame in tables:
            out = f"{name}.{part}.csv" if part else f"{name}.csv"
            if out in taken:
                continue
            frame.to_csv(root / out, index=False)
            taken.add(out)
            written.append(out)
        notes[name] = (
            f"read as {len(written)} table(s): {', '.join(written)}"
            if written
            else f"{NOT_READ}: no sheet or record list with 2 or more columns and rows"
        )
    return notes


class _Unreadable(Exception):
    """Why a document holds no table we can read (the note names the fix)."""


def _workbook(path: Path) -> list[tuple[str, pd.DataFrame]]:
    if path.suffix.lower() == ".xls":
        raise _Unreadable(
            "an Excel 97 workbook (.xls), which dareforge does not read; save it as .xlsx or CSV"
        )
    try:
        sheets = pd.read_excel(path, sheet_name=None, dtype=str, engine="openpyxl")
    except Exception as exc:  # openpyxl raises whatever a broken zip or XML gives it
        raise _Unreadable(f"not a readable Excel workbook ({type(exc).__name__}: {exc})") from None
    filled = {sheet: frame.dropna(how="all").dropna(axis=1, how="all") for sheet, frame in sheets.items()}
    return [(_part_name(sheet), frame) for sheet, frame in filled.items() if _is_table(frame)]


def _json(path: Path) -> list[tuple[str, pd.DataFrame]]:
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    try:
        if path.suffix.lower() in (".jsonl", ".ndjson"):
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            records = _records(json.loads(text))
    except json.JSONDecodeError as exc:
        raise _Unreadable(f"not valid JSON ({exc})") from None
    if not isinstance(records, list) or not records or not all(isinstance(r, dict) for r in records):
        raise _Unreadable("no list of records (objects with the same fields) in it")
    frame = pd.json_normalize(records)
    frame = frame.map(lambda v: json.dumps(v) if isinstance(v, (list, dict)) else v)
    return [("", frame)] if _is_table(frame) else []


def _records(data: object) -> object:
    """The list of records in a JSON document: the document itself, or its largest list of objects."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        lists = [
            v for v in data.values() if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)
        ]
        if lists:
            return max(lists, key=len)
    return None


def _is_table(frame: pd.DataFrame) -> bool:
    return frame.shape[1] >= MIN_COLUMNS and frame.shape[0] >= 2


def _part_name(sheet: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", sheet).strip("_") or "sheet"
