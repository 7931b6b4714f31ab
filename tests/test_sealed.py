"""Opaque cursors: CursorSealer seals Page cursors and opens them into paginate kwargs."""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from conftest import recording
from sqlalchemy_ulid import ULID, CursorSealer, InvalidULID, Page, ULIDType, paginate

KEY = bytes(range(32))
OLD_KEY = bytes(range(100, 132))
U = ULID("01HTQW311N1KR5G0Y75M3EF00H")

meta = sa.MetaData()
events = sa.Table("sealed_events", meta, sa.Column("id", ULIDType(), primary_key=True))


@pytest.fixture
def ids(engine: Engine) -> Iterator[list[ULID]]:
    meta.drop_all(engine)
    meta.create_all(engine)
    rng = random.Random(3)
    made = sorted(
        ULID.from_parts(1_712_345_678_901 + n // 2, rng.getrandbits(80)) for n in range(23)
    )
    with engine.begin() as conn:
        conn.execute(events.insert(), [{"id": i} for i in made])
    yield made
    meta.drop_all(engine)


@pytest.mark.parametrize("descending", [False, True])
def test_walk_both_ways_with_sealed_cursors(
    engine: Engine, ids: list[ULID], descending: bool
) -> None:
    sealer = CursorSealer(KEY, context="events")
    stmt = sa.select(events.c.id)
    display = ids[::-1] if descending else ids
    with Session(engine) as session:
        forward: list[ULID] = []
        kwargs: dict[str, object] = {"descending": descending}
        while True:
            page = paginate(session, stmt, events.c.id, limit=5, **kwargs)  # type: ignore[arg-type]
            forward += page.items
            next_token, prev_token = sealer.seal(page, descending=descending)
            for token in (next_token, prev_token):
                # Neither the id nor its text appears in the token.
                assert token is None or not any(str(i) in token for i in ids)
            if next_token is None:
                break
            kwargs = dict(sealer.open(next_token, descending=descending))
        assert forward == display

        backward: list[ULID] = []
        while prev_token is not None:
            page = paginate(session, stmt, events.c.id, limit=5, **sealer.open(prev_token))
            backward = list(page.items) + backward
            _, prev_token = sealer.seal(page, descending=descending)
        assert backward == display[:-3]  # all but the last page we started from


def test_open_returns_paginate_kwargs() -> None:
    sealer = CursorSealer(KEY)
    assert sealer.open(sealer.seal_cursor(U)) == {"after": U, "descending": False}
    assert sealer.open(sealer.seal_cursor(str(U).lower(), before=True, descending=True)) == {
        "before": U,
        "descending": True,
    }
    # Deterministic, URL-safe, 46 characters.
    token = sealer.seal_cursor(U)
    assert token == sealer.seal_cursor(U)
    assert len(token) == 46
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_every_single_byte_change_is_refused() -> None:
    sealer = CursorSealer(KEY)
    raw = bytearray(base64.urlsafe_b64decode(sealer.seal_cursor(U) + "=="))
    for index in range(len(raw)):
        for bit in range(8):
            changed = bytearray(raw)
            changed[index] ^= 1 << bit
            token = base64.urlsafe_b64encode(bytes(changed)).rstrip(b"=").decode()
            with pytest.raises(InvalidULID, match="not valid"):
                sealer.open(token)


@pytest.mark.parametrize(
    "token",
    [
        "",  # empty
        str(U),  # a raw id is not a token
        "A" * 45,  # one character short
        "A" * 47,  # one character long
        "!" * 46,  # outside base64url
        "+" * 46,  # standard base64, not URL-safe
        "A" * 46,  # right shape, wrong version
    ],
)
def test_malformed_tokens(token: str) -> None:
    with pytest.raises(InvalidULID):
        CursorSealer(KEY).open(token)


def test_non_canonical_last_character_is_refused() -> None:
    sealer = CursorSealer(KEY)
    token = sealer.seal_cursor(U)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    # The last character holds 2 data bits and 4 padding bits: its 15 siblings
    # decode to the same bytes, and must still be refused.
    start = alphabet.index(token[-1]) & ~0b1111
    for char in alphabet[start : start + 16]:
        if char != token[-1]:
            with pytest.raises(InvalidULID):
                sealer.open(token[:-1] + char)


def test_key_rotation() -> None:
    old = CursorSealer(OLD_KEY)
    token_from_old = old.seal_cursor(U)
    rotated = CursorSealer([KEY, OLD_KEY])
    # Old tokens still open; new ones are sealed with the new key only.
    assert rotated.open(token_from_old) == {"after": U, "descending": False}
    assert rotated.seal_cursor(U) == CursorSealer(KEY).seal_cursor(U)
    with pytest.raises(InvalidULID):
        old.open(rotated.seal_cursor(U))
    # Once the old key is dropped, its tokens fail like tampered ones.
    with pytest.raises(InvalidULID, match="not valid"):
        CursorSealer(KEY).open(token_from_old)


def test_context_binds_tokens_to_their_endpoint() -> None:
    token = CursorSealer(KEY, context="/orders").seal_cursor(U)
    with pytest.raises(InvalidULID):
        CursorSealer(KEY, context="/invoices").open(token)


def test_order_mismatch_is_refused() -> None:
    sealer = CursorSealer(KEY)
    with pytest.raises(InvalidULID, match="ascending order"):
        sealer.open(sealer.seal_cursor(U), descending=True)


def test_bad_token_fails_before_sql(engine: Engine, ids: list[ULID]) -> None:
    sealer = CursorSealer(KEY)
    with Session(engine) as session, recording(engine) as seen, pytest.raises(InvalidULID):
        paginate(session, sa.select(events.c.id), events.c.id, **sealer.open("x" * 46))
    assert seen == []


@pytest.mark.parametrize(
    ("keys", "error"),
    [
        (b"short", ValueError),  # under 16 bytes
        ([], ValueError),  # no key at all
        (["a text key" * 4], ValueError),  # keys are bytes, not str
    ],
)
def test_bad_keys(keys: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        CursorSealer(keys)  # type: ignore[arg-type]


def test_repr_hides_keys_and_generate_key_is_random() -> None:
    assert KEY.hex() not in repr(CursorSealer(KEY))
    assert "1 key" in repr(CursorSealer(KEY))
    assert CursorSealer.generate_key() != CursorSealer.generate_key()
    with pytest.raises(TypeError):
        CursorSealer(KEY).seal_cursor(12345)  # type: ignore[arg-type]
    with pytest.raises(InvalidULID):
        CursorSealer(KEY).seal_cursor("not a ulid")


def test_empty_page_has_no_tokens() -> None:
    page: Page[ULID] = Page(items=[], next_cursor=None, prev_cursor=None, has_more=False)
    assert CursorSealer(KEY).seal(page) == (None, None)
