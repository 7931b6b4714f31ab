"""The storage conversion SQL's old import path (the Alembic ops import it).

The SQL is in ``_convert/``, one module per database with both key kinds.
"""

from __future__ import annotations

from ._convert import ConvertSQL

__all__ = ["ConvertSQL"]
