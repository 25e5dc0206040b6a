"""`dareforge browse`: the auditor's workbench, a small ASGI app (Starlette) with server-rendered Jinja2
templates over the store.

Pages read through DuckDB views over the store's tables (`Store.connect`, one connection per server kept while
the store is unchanged: `browse.data`), release manifests and task manifests; the one write is
a review (`dareforge.reviews`), posted with the server's same-origin token. Every value from outside (column
names, cells, descriptions, instructions, agent outputs) is rendered through Jinja2's autoescape; no template
marks anything safe (the ladder plot is SVG written by the template, its labels escaped the same way). The
private side (references, answers, findings, verdicts, the ladder, trajectories, probes) shows only with
`private`.
"""

from dareforge.browse.app import make_app

__all__ = ["make_app"]
