"""The report page: data (model.py), its HTML (html.py) and markdown, its plots (plots.py), and
the pages of one export (export.py: the sections the analyses declare) and of a sweep
folder (sweep.py)."""
