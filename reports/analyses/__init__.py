"""Every analysis, one module each: a module of this package that defines ``ANALYSIS`` (a
``reports.pipeline.analysis.Analysis``) is a command of ``nsys-mine``, an MCP tool and a row of
the docs; ``reports.pipeline.registry`` finds them by name."""
