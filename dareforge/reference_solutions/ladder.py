"""A solver ladder: standard solutions of a goal task, from weak to strong, each a script an agent could submit.

Below the first rung here sits the trivial one (the task's own bar: majority or class shares, the training
mean, or the best model-free forecast), which needs no script. Then, in the order a task that discriminates
between solvers should score them: a linear model, a depth-limited tree, gradient boosting with defaults, and
gradient boosting that searches for its number of trees (at twice the default learning rate, stopped once
five more do not lower the loss on a seeded holdout of a fifth of the training rows). A search over
settings would refit the model once per setting: on the builtin catalog a four-setting grid made the ladder
cost more than generate itself, where its budget is half (`python -m bench ladder`); early stopping costs
less than the default model's fit and scores within its noise on every task there. Every rung reads the
strong reference's own features through its own preprocessing (`reference_code.Estimator`): the rungs
differ in the model only. On a forecast, the rungs above the linear one choose between their model and the
linear trend-and-season one on the latest training rows, as the strong reference does: a tree alone
forecasts a trending series as flat, which ranks tree models below the linear one for a reason no solver
would accept. Every model is seeded. A forecast's ladder is another one, of rungs that differ in kind
(`series_ladder`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dareforge.reference_solutions.reference_code import Estimator, StrongSpec, strong_reference_code
from dareforge.reference_solutions.series_ladder import smoothing_code

TRIVIAL = "trivial"
"""The rung below the scripts: the task's baseline predictor."""
STOPPING = "learning_rate=0.2, early_stopping=True, validation_fraction=0.2, n_iter_no_change=5"
"""The top rung's search: the number of boosting iterations (at most the default 100, at twice the default
learning rate), on a holdout of the training rows."""
TREE_DEPTH = 6


@dataclass(frozen=True)
class Rung:
    """A rung: the strong reference's script with `estimator` in place of its model, or (`script`) a script of
    its own written from the spec."""

    name: str
    estimator: Estimator | None = None
    script: Callable[[StrongSpec], str] | None = None

    def code(self, spec: StrongSpec) -> str:
        """The rung's standalone script: reads train.csv and test.csv, writes predictions.csv."""
        return self.script(spec) if self.script is not None else strong_reference_code(spec, self.estimator)


LINEAR_REGRESSION = Estimator("Ridge(alpha=1.0)", linear=True)


UNORDERED = frozenset({frozenset({"smoothing", "linear"})})
"""Pairs of rungs neither of which is expected to forecast better: exponential smoothing and a linear
trend-and-season model each win on some series (the strong reference chooses between them, and boosting, on the
latest training rows), so their order says nothing about the task, and tau leaves the pair out."""


def model_rungs(spec: StrongSpec) -> list[Rung]:
    """The scripted rungs of `spec`'s task, weakest first."""
    if spec.time_column is not None:
        return [
            Rung("smoothing", script=smoothing_code),
            Rung("linear", LINEAR_REGRESSION),
            # The strong reference itself (no estimator in its place): graded on its stored predictions.
            Rung("strong"),
        ]
    kind = "Classifier" if spec.classification else "Regressor"
    boosted = f"HistGradientBoosting{kind}(random_state=0)"
    if spec.classification:
        linear = Estimator(
            "LogisticRegression(max_iter=1000)", "from sklearn.linear_model import LogisticRegression\n", True
        )
    else:
        linear = LINEAR_REGRESSION
    return [
        Rung("linear", linear),
        Rung(
            "tree",
            Estimator(
                f"DecisionTree{kind}(max_depth={TREE_DEPTH}, random_state=0)",
                f"from sklearn.tree import DecisionTree{kind}\n",
            ),
        ),
        Rung("boosted", Estimator(boosted)),
        Rung("boosted+stopping", Estimator(f"HistGradientBoosting{kind}({STOPPING}, random_state=0)")),
    ]
