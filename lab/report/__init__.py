"""HTML reports: `rundata` (a stored run read and its numbers derived), `formatting`, `charts` (inline
SVG), `compare`, and `pages` (Jinja pages written to reports/). Imports without torch or a GPU."""
