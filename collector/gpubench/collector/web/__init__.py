"""The community results site: a read-only web front of a collector's gRPC API.

`gpubench-collector web --collector ADDRESS` serves leaderboards, comparisons, a page
per GPU model and per run, `/metrics` and `/healthz`. The site is a client of the
collector (gpubench.client.Client), never of its database: the collector's read rules
(tokens, --public-read, flagged and published runs, the comparison key) stay in one
place, and it cannot write.

Modules: app (routes, JSON twins, downloads), views (one function per page), lists
(sorting and pages), reads (the collector calls a page needs), charts (server-side
SVG), text (escaping, and figures through gpubench.figures), metrics (Prometheus),
server (uvicorn).
"""
