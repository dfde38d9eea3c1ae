"""The web dashboard: server-rendered pages (pages.py), SVG charts (charts.py, tree.py) and their queries."""
