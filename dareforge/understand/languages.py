"""A target named in a description written in another language than English.

Kaggle descriptions in Turkish, Spanish, Portuguese, French, Italian, German, Dutch or Indonesian say what to
predict with their own words ("uretim miktari tahmini", "predecir el precio", "prévision de la demande"),
and their column names are often in that language too, glossed where the data is described: "gunluk elektrik
uretim miktari (**Uretim_MWh**)". A prediction phrase names a column when one of its listed parts ends with
the words that gloss the column, or names the column itself. Turkish puts the object before the verb, the
others after it.
"""

from __future__ import annotations

import re
import unicodedata

PREDICT_AFTER = re.compile(
    r"\b(?:predecir|predicci[oó]n|pronosticar|pron[oó]stico|prever|previs[aã]o|predi[cç][aã]o|prever|"
    r"pr[eé]dire|pr[eé]diction|pr[eé]voir|pr[eé]vision|prevedere|previsione|predizione|vorhersagen|"
    r"vorhersage|prognostizieren|prognose|voorspellen|voorspelling|memprediksi|prediksi|peramalan)\s+"
    r"(?P<x>[^\n.,;()]{1,60})",
    re.IGNORECASE,
)
"""The verb or noun first, its object after: "predecir el precio", "prévision de la demande"."""
PREDICT_BEFORE = re.compile(r"(?P<x>[^\n.,;()]{1,60}?)\s+(?:tahmin|öngörü)\w*", re.IGNORECASE)
"""Turkish: the object first, "uretim miktari tahmini" (the prediction of the amount produced)."""
CONJUNCTIONS = re.compile(
    r"\s+(?:ve|veya|ile|and|y|e|o|et|ou|und|oder|en|of|dan|atau)\s+|\s*[/&]\s*", re.IGNORECASE
)
GLOSS = re.compile(
    r"(?P<p>[^\n.,;:()|]{2,80}?)\s*\(\s*[*`'\"]*(?P<c>[^()*`'\"\n]{1,60}?)[*`'\"]*\s*\)", re.IGNORECASE
)
"""A phrase and the column it describes in parentheses: "uretim miktari (**Uretim_MWh**)"."""
HEAD_WORDS = 2
"""Words at the end of a gloss that name what it describes (its head: "uretim miktari", "tuketim miktari")."""
ARTICLES = {
    "de", "del", "des", "du", "la", "el", "los", "las", "le", "les", "il", "lo", "di", "della", "der", "die",
    "das", "den", "o", "os", "as", "a", "van", "het", "een", "un", "una", "une",
}  # fmt: skip


def fold(text: str) -> str:
    """Lower-case ASCII words: accents dropped and the dotless i read as i (Turkish `oran\u0131`
    -> 'orani'), so a phrase and a gloss compare the same whatever the keyboard wrote."""
    text = text.replace("\u0131", "i").replace("\u0130", "I")  # the dotless i, small and capital
    plain = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    plain = re.sub(r"([a-z])([A-Z])", r"\1 \2", plain)
    return " ".join(re.findall(r"[a-z0-9]+", plain.lower()))


def glosses(text: str, exact) -> dict[str, list[str]]:
    """Column -> the head words of each phrase the text glosses it with (`exact` finds a column by its name)."""
    found: dict[str, list[str]] = {}
    for match in GLOSS.finditer(text):
        column = exact(match.group("c").strip())
        words = [w for w in fold(match.group("p")).split() if w not in ARTICLES]
        if column is not None and words and fold(column) != " ".join(words):
            found.setdefault(column, []).append(" ".join(words[-HEAD_WORDS:]))
    return found


def foreign_targets(sentence: str, glossed: dict[str, list[str]], in_phrase) -> list[str]:
    """The columns a prediction phrase of another language names in `sentence`, in the order it lists them:
    each listed part names the column whose gloss head ends it, else the column `in_phrase` finds in it."""
    phrases = [m.group("x") for m in PREDICT_BEFORE.finditer(sentence)]
    phrases += [m.group("x") for m in PREDICT_AFTER.finditer(sentence)]
    named: list[str] = []
    for phrase in phrases:
        for part in CONJUNCTIONS.split(phrase):
            words = " ".join(w for w in fold(part).split() if w not in ARTICLES)
            if not words:
                continue
            heads = [
                c for c, gs in glossed.items() if any(f" {words}".endswith(f" {g}") or g == words for g in gs)
            ]
            for column in heads or in_phrase(part)[:1]:
                if column not in named:
                    named.append(column)
    return named
