"""Analyses of nsys exports: one module per question (``reports.analyses``), the session that
opens an export for them (``reports.session.Session``), the renderer (``reports.render``) and
the report page (``reports.page``)."""
