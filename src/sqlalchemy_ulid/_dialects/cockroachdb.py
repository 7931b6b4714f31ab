"""CockroachDB: PostgreSQL's storage (native uuid), without what has not been tried there."""

from __future__ import annotations

from dataclasses import replace

from . import postgresql

__all__ = ["ROW"]

# PostgreSQL's storage, but neither gen_ulid() nor the conversion SQL has
# been tried there.
ROW = replace(
    postgresql.ROW,
    server=None,
    convert=None,
    convert_uuid7=None,
    time=None,
    uuid_as_bytes=None,
    uuid7=None,
    locks=None,
    unnest_arrays=False,
)
