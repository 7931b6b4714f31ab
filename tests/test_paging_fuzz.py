"""paginate() against the unpaged query, on statements a seeded generator builds.

The generator and the walk are in ``_paging_fuzz.py``. Each backend runs a
fixed seed and one fresh seed (printed, and in every failure's reproduction),
``--fuzz-n`` statements each (or ``SQLALCHEMY_ULID_FUZZ_N``; 150 by default).
``SQLALCHEMY_ULID_FUZZ_SEED`` replaces the fresh seed, to rerun a failure.
The fresh seed is in the server tier (marker ``server``): CI's Python-version
jobs run the fixed seed alone, on a slice (``SQLALCHEMY_ULID_FUZZ_N`` in
``.ci/run``), since the statements depend on SQLAlchemy's compiler; main and
pg18 run both seeds whole.
Every statement must page exactly as the unpaged query returns its rows,
forward and backward, or be refused with a ``ValueError`` before any SQL.
"""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy.engine import Engine

from _paging_fuzz import Report, case, check, fresh_seed, tables

FIXED_SEED = "29"
FRESH_SEED = os.environ.get("SQLALCHEMY_ULID_FUZZ_SEED") or fresh_seed()


@pytest.fixture
def fuzz_n(request: pytest.FixtureRequest) -> int:
    given = request.config.getoption("--fuzz-n") or os.environ.get("SQLALCHEMY_ULID_FUZZ_N")
    return int(given or 150)


@pytest.mark.parametrize(
    "seed", [FIXED_SEED, pytest.param(FRESH_SEED, marks=pytest.mark.server)], ids=["fixed", "fresh"]
)
def test_every_statement_pages_like_the_unpaged_query_or_is_refused_before_sql(
    engine: Engine, seed: str, fuzz_n: int
) -> None:
    name = engine.dialect.name
    print(f"paging fuzzer on {name}: seed {seed!r}, {fuzz_n} statements")
    report = Report(name)
    with tables(engine, uuid.uuid4().hex[:8], seed) as db:
        for index in range(fuzz_n):
            the = case(seed, index, db)
            if the.only and name not in the.only:
                continue
            report.add(engine, seed, index, the, check(engine, the))
    print(report.table())
    assert not report.failures, (
        f"{len(report.failures)} statements did not page like the unpaged query "
        f"(seed {seed!r}):\n{report.table()}\n" + "\n".join(report.failures[:12])
    )
