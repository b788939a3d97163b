"""Version-tolerant readers for Nsight Systems SQLite exports (2019 to 2026), no nsys binary
needed."""

from nsys_parsers.errors import NsysMineError

__all__ = ["NsysMineError"]
