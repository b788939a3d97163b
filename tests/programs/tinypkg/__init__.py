"""A package the tests run with ``python -m tinypkg`` (from tests/programs), unmodified."""
