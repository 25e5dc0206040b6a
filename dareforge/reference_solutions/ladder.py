"""A solver ladder: standard solutions of a goal task, from weak to strong, each a script an agent could submit.

Below the first rung here sits the trivial one (the task's own bar: majority or class shares, the training
mean, or the best model-free forecast), which needs no script. Then, in the order a task that discriminates
between solvers should score them: a linear model, a depth-limited tree, gradient boosting with defaults, and
gradient boosting with a small search (four settings, chosen on a seeded holdout of a fifth of the training
rows, then refit on all of them). Every rung reads the strong reference's own features through its own
preprocessing (`reference_code.Estimator`): the rungs differ in the model only. On a forecast, the rungs above
the linear one choose between their model and the linear trend-and-season one on the latest training rows, as
the strong reference does: a tree alone forecasts a trending series as flat, which ranks tree models below
the linear one for a reason no solver would accept. Every model is seeded.
"""

from __future__ import annotations

from dataclasses import dataclass

from dareforge.reference_solutions.reference_code import Estimator, StrongSpec, strong_reference_code

TRIVIAL = "trivial"
"""The rung below the scripts: the task's baseline predictor."""
SEARCH = {"learning_rate": [0.05, 0.2], "max_leaf_nodes": [15, 63]}
"""The boosted search's settings: a slower and a faster learner, each with smaller and larger trees."""
TREE_DEPTH = 6


@dataclass(frozen=True)
class Rung:
    name: str
    estimator: Estimator

    def code(self, spec: StrongSpec) -> str:
        """The rung's standalone script: reads train.csv and test.csv, writes predictions.csv."""
        return strong_reference_code(spec, self.estimator)


def model_rungs(spec: StrongSpec) -> list[Rung]:
    """The scripted rungs of `spec`'s task, weakest first."""
    kind = "Classifier" if spec.classification else "Regressor"
    boosted = f"HistGradientBoosting{kind}(random_state=0)"
    if spec.classification:
        linear = Estimator(
            "LogisticRegression(max_iter=1000)", "from sklearn.linear_model import LogisticRegression\n", True
        )
        scoring = "f1_macro"
    else:
        linear = Estimator("Ridge(alpha=1.0)", linear=True)
        # Forecasts are scored by their absolute error against the model-free one, other numbers by R².
        scoring = "neg_mean_absolute_error" if spec.time_column else "r2"
    holdout = "ShuffleSplit(n_splits=1, test_size=0.2, random_state=0)"
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
        Rung(
            "boosted+search",
            Estimator(
                f"GridSearchCV({boosted}, {SEARCH!r}, scoring={scoring!r}, cv={holdout})",
                "from sklearn.model_selection import GridSearchCV, ShuffleSplit\n",
            ),
        ),
    ]
