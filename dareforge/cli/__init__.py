"""`dareforge`'s command line: one module per command group, each registering its commands on `app.app` through
`app.command` (which also turns what a user can fix into a one-line message and exit code 2), under a panel of
the help; importing the package registers them all, panel by panel.

- `stages`: one pipeline stage per command (crawl ... gate), and report, audit, evaluate, resimulate;
- `release`: release build, list, verify, publish;
- `reviews`: review add, list, export (people's decisions the gate honours);
- `training`: probe, obscure, gold, synthesize, judge, export;
- `explore`: sources and sql;
- `run`: the whole pipeline and its summary;
- `teach`: fine-tune a proxy model on the SFT export and measure what it learned.
"""

from dareforge.cli import explore, release_commands, reviews, run, stages, teach, training  # noqa: F401  (declare the commands)
from dareforge.cli.app import app, register_commands

register_commands()

__all__ = ["app"]
