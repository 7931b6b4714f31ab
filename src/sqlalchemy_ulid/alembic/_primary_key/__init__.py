"""``op.convert_primary_key_to_ulid`` and ``op.restore_legacy_primary_key``.

``_ops`` holds the two ops (importing it registers them on Alembic's
``Operations``), ``_plan`` the plan (reflection, dry-run text), ``_state``
its stored state, ``_checks`` what is refused before any DDL, and ``_fill`` and
``_phases`` the phases that carry a plan out.
"""

from __future__ import annotations

from ._checks import ConversionRefused
from ._ops import ConvertPrimaryKeyToULIDOp, RestoreLegacyPrimaryKeyOp

__all__ = ["ConversionRefused", "ConvertPrimaryKeyToULIDOp", "RestoreLegacyPrimaryKeyOp"]
