"""The harness itself: each backend is the real server it claims to be."""

from __future__ import annotations

import sqlalchemy as sa

from conftest import Backend


def test_backend_is_real(backend: Backend) -> None:
    assert backend.engine is not None
    with backend.engine.connect() as conn:
        if backend.name == "postgresql":
            assert "PostgreSQL" in conn.scalar(sa.text("select version()"))
        elif backend.name == "mysql":
            assert "MariaDB" in conn.scalar(sa.text("select version()"))
        else:
            assert conn.scalar(sa.text("select sqlite_version()"))
