"""Multi-key cursors, sealed cursors and totals, on the three servers.

Every bad cursor raises InvalidCursor before any statement is sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from conftest import recording
from sqlalchemy_ulid import (
    ULID,
    CursorSealer,
    InvalidCursor,
    InvalidULID,
    ULIDType,
    paginate,
)
from sqlalchemy_ulid._paging._cursor import decode, encode, fingerprint

meta = sa.MetaData()
orders = sa.Table(
    "paging_cursor_orders",
    meta,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("note", sa.String(10)),
)
BY_TOTAL = sa.select(orders).order_by(orders.c.total.desc(), orders.c.id.desc())
BY_NOTE = sa.select(orders).order_by(orders.c.note, orders.c.id.desc())
KEY = bytes(range(32))


@pytest.fixture
def ids(engine: Engine) -> Iterator[list[ULID]]:
    meta.drop_all(engine)
    meta.create_all(engine)
    made = [ULID.from_parts(1_712_345_678_901 + k, k) for k in range(12)]
    with engine.begin() as conn:
        conn.execute(
            orders.insert(),
            [{"id": i, "total": k % 4, "note": "abc"[k % 3]} for k, i in enumerate(made)],
        )
    yield made
    meta.drop_all(engine)


def _cursor(engine: Engine, stmt: sa.Select[Any] = BY_TOTAL) -> str:
    with engine.connect() as conn:
        cursor = paginate(conn, stmt, orders.c.id, limit=3).next_cursor
    assert cursor is not None
    return cursor


def _flip(text: str, index: int) -> str:
    swapped = "A" if text[index] != "A" else "B"
    return text[:index] + swapped + text[index + 1 :]


def _rebuilt(text: str, version: int | None = None, body: bytes | None = None) -> str:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    head, check, old = raw[:7], raw[7:11], raw[11:]
    if version is not None:
        head = bytes([version]) + head[1:]
    if body is not None:
        old = body
    return base64.urlsafe_b64encode(head + check + old).rstrip(b"=").decode()


def _bad_cursors(good: str, other_sort: str) -> list[tuple[str, object]]:
    raw = base64.urlsafe_b64decode(good + "=" * (-len(good) % 4))
    body = json.loads(raw[11:])
    return [
        ("empty", ""),
        ("truncated", good[:-3]),
        ("one character changed", _flip(good, len(good) // 2)),
        ("not base64url", good[:-1] + "*"),
        ("padding", good + "=="),
        ("wrong version", _rebuilt(good, version=9)),
        ("another sort", other_sort),
        ("a bare id", "01HTQW311N1KR5G0Y75M3EF00H"),
        ("a ULID object", ULID.from_int(5)),
        (
            "values edited (check kept)",
            _rebuilt(good, body=json.dumps([["i", "9"], body[1]]).encode()),
        ),
        ("huge", "A" * 5000),
    ]


def test_every_bad_cursor_is_invalid_before_sql(engine: Engine, ids: list[ULID]) -> None:
    good, other = _cursor(engine), _cursor(engine, BY_NOTE)
    for name, bad in _bad_cursors(good, other):
        for way in ("after", "before"):
            with engine.connect() as conn, recording(engine) as seen:
                with pytest.raises(InvalidCursor):
                    paginate(conn, BY_TOTAL, orders.c.id, **{way: bad})  # type: ignore[arg-type]
                assert seen == [], name


def test_a_multi_key_cursor_in_id_order_is_another_sort(engine: Engine, ids: list[ULID]) -> None:
    good = _cursor(engine)
    with (
        engine.connect() as conn,
        recording(engine) as seen,
        pytest.raises(InvalidCursor, match="several keys"),
    ):
        paginate(conn, sa.select(orders), orders.c.id, after=good)
    assert seen == []
    assert issubclass(InvalidCursor, InvalidULID)
    assert issubclass(InvalidCursor, ValueError)


def test_decode_is_strict_about_its_values() -> None:
    sort = fingerprint(["k"])
    good = encode(sort, [1, "01HTQW311N1KR5G0Y75M3EF00H"])
    assert decode(good, sort, 2) == [1, "01HTQW311N1KR5G0Y75M3EF00H"]
    with pytest.raises(InvalidCursor, match="another sort"):
        decode(good, fingerprint(["j"]), 2)
    with pytest.raises(InvalidCursor):
        decode(good, sort, 3)  # the wrong number of keys
    for bad in ([["i", "1.5"]], [["n", 3]], [["f", "nope"]], [["zz", 1]], {"i": 1}):
        body = json.dumps(bad).encode()
        head = bytes([1]) + sort
        import hashlib

        check = hashlib.sha256(head + body).digest()[:4]
        text = base64.urlsafe_b64encode(head + check + body).rstrip(b"=").decode()
        with pytest.raises(InvalidCursor):
            decode(text, sort, 1)


# -- sealed cursors ---------------------------------------------------------------


def test_sealed_multi_key_cursors_walk_and_expire(engine: Engine, ids: list[ULID]) -> None:
    now = [1_000_000.0]
    sealer = CursorSealer(KEY, context="orders", max_age=timedelta(minutes=5), clock=lambda: now[0])
    with engine.connect() as conn:
        want = [row.id for row in conn.execute(BY_TOTAL)]
        got: list[ULID] = []
        kwargs: dict[str, Any] = {}
        while True:
            page = paginate(conn, BY_TOTAL, orders.c.id, limit=5, **kwargs)
            got += [row.id for row in page.items]
            token, _ = sealer.seal(page)
            if token is None:
                break
            assert page.next_cursor is not None
            assert page.next_cursor not in token
            opened = sealer.open(token)
            assert opened["after"] == page.next_cursor
            kwargs = {"after": opened["after"]}
        assert got == want
        token = sealer.seal_cursor(_cursor(engine))
        now[0] += 301
        with recording(engine) as seen, pytest.raises(InvalidCursor, match="expired"):
            paginate(conn, BY_TOTAL, orders.c.id, **sealer.open(token))
        assert seen == []


def test_sealed_bare_ids_keep_their_format_and_gain_expiry() -> None:
    plain = CursorSealer(KEY)
    token = plain.seal_cursor(ULID.from_int(7))
    assert len(token) == 46
    assert plain.open(token)["after"] == ULID.from_int(7)
    now = [100.0]
    aging = CursorSealer(KEY, max_age=10, clock=lambda: now[0])
    aged = aging.seal_cursor(ULID.from_int(7), before=True)
    assert aging.open(aged) == {"before": ULID.from_int(7), "descending": False}
    now[0] += 11
    with pytest.raises(InvalidCursor, match="expired"):
        aging.open(aged)
    with pytest.raises(InvalidCursor, match="no issue time"):
        aging.open(token)  # a token sealed without max_age
    for bad in (aged[:-2], aged[:30] + ("A" if aged[30] != "A" else "B") + aged[31:], aged + "A"):
        with pytest.raises(InvalidCursor):
            aging.open(bad)
    with pytest.raises(ValueError, match="max_age"):
        CursorSealer(KEY, max_age=0)


# -- totals -----------------------------------------------------------------------


def test_totals_exact_and_capped(engine: Engine, ids: list[ULID]) -> None:
    filtered = BY_TOTAL.where(orders.c.total >= 1)
    with engine.connect() as conn:
        assert paginate(conn, filtered, orders.c.id, limit=2).total is None
        with recording(engine) as seen:
            page = paginate(conn, filtered, orders.c.id, limit=2, total="exact")
        assert page.total == 9
        assert len(seen) == 2
        assert "count(*)" in seen[-1].lower()
        assert paginate(conn, filtered, orders.c.id, limit=2, total=5).total == 5
        assert paginate(conn, filtered, orders.c.id, limit=2, total=50).total == 9
        assert paginate(conn, sa.select(orders), orders.c.id, total="exact").total == 12


def test_total_estimate(engine: Engine, ids: list[ULID]) -> None:
    with engine.connect() as conn, recording(engine) as seen:
        if engine.dialect.name == "sqlite":
            with pytest.raises(ValueError, match="EXPLAIN"):
                paginate(conn, BY_TOTAL, orders.c.id, total="estimate")
            assert seen == []
            return
        page = paginate(conn, BY_TOTAL, orders.c.id, limit=2, total="estimate")
    assert isinstance(page.total, int)
    assert page.total >= 0
    assert seen[-1].startswith("EXPLAIN")


@pytest.mark.parametrize("bad", [0, -1, True, "all", 1.5])
def test_bad_totals_refused_before_sql(engine: Engine, ids: list[ULID], bad: object) -> None:
    with (
        engine.connect() as conn,
        recording(engine) as seen,
        pytest.raises(ValueError, match="total"),
    ):
        paginate(conn, BY_TOTAL, orders.c.id, total=bad)  # type: ignore[arg-type]
    assert seen == []
