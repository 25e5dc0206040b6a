"""`dareforge browse`: the auditor's workbench, a small ASGI app (Starlette) with server-rendered Jinja2
templates over the store.

Pages read through DuckDB views over the store's tables (`Store.connect`) and task manifests; the one write is
a review (`dareforge.reviews`), posted with the server's same-origin token. Every value from outside (column
names, cells, descriptions, instructions, agent outputs) is rendered through Jinja2's autoescape; no template
marks anything safe. The private side (references, answers, findings, verdicts) shows only with `private`.
"""

from dareforge.browse.app import make_app

__all__ = ["make_app"]
