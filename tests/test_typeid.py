"""Typed ids: the spec's vectors both ways, a reference parser as oracle, the value's protocols."""

from __future__ import annotations

import copy
import itertools
import json
import os
import pickle
import re
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _threads import at_once
from sqlalchemy_ulid import (
    ULID,
    InvalidTypeID,
    InvalidULID,
    TypeID,
    new_typeid,
    new_uuid7,
)
from strategies import maybe_typeid_texts, typeid_parts, typeid_prefixes, ulids

DATA = Path(__file__).parent / "data" / "typeid"
VALID = json.loads((DATA / "valid.json").read_text())
INVALID = json.loads((DATA / "invalid.json").read_text())
SPEC_V7 = "01h455vb4pex5vsknk084sn02q"


# -- the spec's vectors, both directions -------------------------------------------


@pytest.mark.parametrize("case", VALID, ids=[case["name"] for case in VALID])
def test_valid_vector_parses_to_its_prefix_and_uuid(case: dict[str, str]) -> None:
    typeid = TypeID.parse(case["typeid"])
    assert typeid.prefix == case["prefix"]
    assert typeid.uuid == uuid.UUID(case["uuid"])
    assert str(typeid) == case["typeid"]


@pytest.mark.parametrize("case", VALID, ids=[case["name"] for case in VALID])
def test_valid_vector_formats_from_its_prefix_and_uuid(case: dict[str, str]) -> None:
    typeid = TypeID.from_uuid(case["prefix"], uuid.UUID(case["uuid"]))
    assert str(typeid) == case["typeid"]
    assert typeid.suffix == case["typeid"].rpartition("_")[2]


@pytest.mark.parametrize("case", INVALID, ids=[case["name"] for case in INVALID])
def test_invalid_vector_is_refused(case: dict[str, str]) -> None:
    with pytest.raises(InvalidTypeID):
        TypeID.parse(case["typeid"])
    with pytest.raises(InvalidTypeID):
        TypeID(case["typeid"])


def test_the_vectors_are_the_spec_files() -> None:
    # The README names where they come from; nothing was added or dropped.
    assert len(VALID) == 9
    assert len(INVALID) == 21
    assert "cb20c6eeb4bc6e5a115fceffcbb22f331d4033f8" in (DATA / "README.md").read_text()


# -- a reference parser as the oracle ----------------------------------------------

_SPEC = re.compile(r"(?:([a-z](?:[a-z_]{0,61}[a-z])?)_)?([0-7][0-9a-hjkmnp-tv-z]{25})")
_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def reference(text: str) -> tuple[str, int] | None:
    """The spec read literally: a regex for the shape, 5 bits per character for the value."""
    match = _SPEC.fullmatch(text)
    if match is None or not text.isascii():
        return None
    value = 0
    for char in match[2]:
        value = value << 5 | _ALPHABET.index(char)
    return match[1] or "", value


@given(maybe_typeid_texts())
def test_parse_accepts_exactly_what_the_spec_accepts(text: str) -> None:
    expected = reference(text)
    if expected is None:
        with pytest.raises(InvalidTypeID):
            TypeID.parse(text)
    else:
        typeid = TypeID.parse(text)
        assert (typeid.prefix, typeid.int) == expected
        assert str(typeid) == text


@given(typeid_parts())
def test_round_trips(parts: tuple[str, uuid.UUID]) -> None:
    prefix, value = parts
    typeid = TypeID.from_uuid(prefix, value)
    text = str(typeid)
    assert reference(text) == (prefix, value.int)
    assert TypeID.parse(text) == typeid
    assert TypeID(text) == typeid
    assert typeid.uuid == value
    assert typeid.bytes == value.bytes
    assert TypeID.from_ulid(prefix, typeid.to_ulid()) == typeid
    assert pickle.loads(pickle.dumps(typeid)) == typeid
    assert text == (f"{prefix}_{typeid.suffix}" if prefix else typeid.suffix)


@given(typeid_prefixes, ulids)
def test_a_ulids_bits_are_a_suffix_and_back(prefix: str, value: ULID) -> None:
    typeid = TypeID.from_ulid(prefix, value)
    assert typeid.suffix == str(value).lower()
    assert typeid.to_ulid() == value
    assert type(typeid.to_ulid()) is ULID


@given(st.lists(typeid_parts(), min_size=2, max_size=8))
def test_order_is_prefix_then_uuid_bytes(parts: list[tuple[str, uuid.UUID]]) -> None:
    typeids = [TypeID.from_uuid(prefix, value) for prefix, value in parts]
    by_value = sorted(typeids)
    assert [(t.prefix, t.bytes) for t in by_value] == sorted(
        (prefix, value.bytes) for prefix, value in parts
    )
    # Within one prefix, the text sorts as the value does.
    for a, b in itertools.pairwise(by_value):
        if a.prefix == b.prefix:
            assert (a < b) == (str(a) < str(b))
            assert (a <= b, a > b, a >= b) == (a.int <= b.int, a.int > b.int, a.int >= b.int)


@given(typeid_parts(), typeid_parts())
def test_equality_and_hash_follow_prefix_and_value(
    a: tuple[str, uuid.UUID], b: tuple[str, uuid.UUID]
) -> None:
    first, second = TypeID.from_uuid(*a), TypeID.from_uuid(*b)
    assert (first == second) == (a == b)
    assert (first != second) == (a != b)
    if first == second:
        assert hash(first) == hash(second)
    assert TypeID.from_uuid(*a) == first
    assert hash(TypeID.from_uuid(*a)) == hash(first)


def test_same_bits_with_another_prefix_is_another_id() -> None:
    value = uuid.UUID(int=7)
    assert TypeID.from_uuid("user", value) != TypeID.from_uuid("org", value)
    assert TypeID.from_uuid("org", value) < TypeID.from_uuid("user", value)
    assert len({TypeID.from_uuid("user", value), TypeID.from_uuid("org", value)}) == 2


def test_is_immutable_and_copies_are_itself() -> None:
    typeid = TypeID.parse(f"user_{SPEC_V7}")
    with pytest.raises(AttributeError, match="immutable"):
        typeid._prefix = "org"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del typeid._int
    assert copy.copy(typeid) is typeid
    assert copy.deepcopy(typeid) is typeid
    assert TypeID(typeid) is typeid


def test_a_tampered_pickle_is_refused() -> None:
    data = pickle.dumps(TypeID.parse(f"user_{SPEC_V7}"))
    tampered = data.replace(b"user_01h", b"User_01h")
    with pytest.raises(InvalidTypeID, match="uppercase 'U'"):
        pickle.loads(tampered)


def test_comparisons_with_other_types() -> None:
    typeid = TypeID.parse(f"user_{SPEC_V7}")
    assert typeid != f"user_{SPEC_V7}"
    assert typeid != typeid.uuid
    with pytest.raises(TypeError):
        _ = typeid < f"user_{SPEC_V7}"  # type: ignore[operator]


def test_views() -> None:
    typeid = TypeID.parse(f"user_{SPEC_V7}")
    assert repr(typeid) == f"TypeID('user_{SPEC_V7}')"
    assert typeid.uuid.version == 7
    assert typeid.int == uuid.UUID("01890a5d-ac96-774b-bcce-b302099a8057").int
    assert typeid.datetime.isoformat() == "2023-06-30T03:34:18.518000+00:00"


# -- the error messages say exactly what is wrong ---------------------------------

_SUFFIX = "00000000000000000000000000"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # an uppercase letter in the prefix
        (f"User_{_SUFFIX}", "uppercase 'U' at position 0 of prefix 'User'"),
        # a digit in the prefix
        (f"user2_{_SUFFIX}", "invalid character '2' at position 4 of prefix 'user2'"),
        # a non-ASCII letter in the prefix
        (f"pr\u00e9fix_{_SUFFIX}", "invalid character '\u00e9' at position 2"),
        # 64 characters of prefix
        ("a" * 64 + f"_{_SUFFIX}", "the prefix is 64 characters, at most 63 are allowed"),
        # a prefix that ends with an underscore
        (f"user__{_SUFFIX}", "prefix 'user_' ends with '_': a prefix starts and ends with"),
        # a separator with no prefix
        (f"_{_SUFFIX}", "starts with '_': a TypeID without a prefix is its 26-character suffix"),
        # nothing at all
        ("", "an empty string is not a TypeID"),
        # 25 characters of suffix
        (f"user_{_SUFFIX[1:]}", "the suffix is 26 characters, got 25"),
        # 27 characters of suffix
        (f"user_{_SUFFIX}0", "the suffix is 26 characters, got 27"),
        # an empty suffix
        ("user_", "the suffix is 26 characters, got 0"),
        # the first suffix character above 7
        ("user_8zzzzzzzzzzzzzzzzzzzzzzzzz", "the suffix must start with 0-7, got '8'"),
        # an uppercase letter in the suffix
        (f"user_{SPEC_V7[:5]}B{SPEC_V7[6:]}", "uppercase 'B' at position 5 of the suffix"),
        # a letter Crockford leaves out
        (f"user_{SPEC_V7[:3]}o{SPEC_V7[4:]}", "invalid character 'o' at position 3 of the suffix"),
        # a space in the suffix
        (f"user_{SPEC_V7[:-1]} ", "invalid character ' ' at position 25 of the suffix"),
    ],
)
def test_messages(text: str, message: str) -> None:
    with pytest.raises(InvalidTypeID) as info:
        TypeID.parse(text)
    assert message in str(info.value)


def test_invalid_typeid_is_the_librarys_invalid_id_error() -> None:
    assert issubclass(InvalidTypeID, InvalidULID)
    assert issubclass(InvalidTypeID, ValueError)
    assert InvalidTypeID.__module__ == "sqlalchemy_ulid"


@pytest.mark.parametrize("value", [None, 5, b"user_" + _SUFFIX.encode(), uuid.UUID(int=1)])
def test_parse_wants_str(value: object) -> None:
    with pytest.raises(TypeError, match="must be str"):
        TypeID.parse(value)  # type: ignore[arg-type]


def test_constructors_check_their_arguments() -> None:
    with pytest.raises(InvalidTypeID, match="uppercase 'U'"):
        TypeID.from_uuid("User", uuid.UUID(int=1))
    with pytest.raises(InvalidTypeID, match="ends with '_'"):
        TypeID.from_ulid("user_", ULID.from_int(1))
    with pytest.raises(TypeError, match=r"expected uuid\.UUID"):
        TypeID.from_uuid("user", "00000000-0000-0000-0000-000000000001")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected ULID"):
        TypeID.from_ulid("user", uuid.UUID(int=1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="prefix is str"):
        TypeID.from_uuid(None, uuid.UUID(int=1))  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeID, match="uppercase 'U'"):
        TypeID["User"]


# -- new_typeid ---------------------------------------------------------------------


def test_new_typeid_is_a_uuid7_from_the_shared_generator() -> None:
    # Interleaved with new_uuid7(), its values fall in between: one generator.
    before = new_uuid7()
    made = [new_typeid("user") for _ in range(1000)]
    after = new_uuid7()
    assert [t.uuid for t in made] == sorted({t.uuid for t in made})
    assert before < made[0].uuid
    assert made[-1].uuid < after
    assert all(t.prefix == "user" and t.uuid.version == 7 for t in made)
    assert all(t.uuid.variant == uuid.RFC_4122 for t in made)
    assert new_typeid().prefix == ""
    assert len(str(new_typeid())) == 26


def test_new_typeid_from_many_threads_is_unique_and_ordered_per_thread() -> None:
    # new_typeid takes new_uuid7's lock-free path itself: the same promises.
    results = at_once(8, lambda n: [new_typeid("user") for _ in range(3000)])
    everything = [t for out in results for t in out]
    assert len(set(everything)) == len(everything) == 8 * 3000
    for out in results:
        assert out == sorted(out)


def test_new_typeid_goes_through_the_generators_slow_path_too() -> None:
    # A millisecond's first id, and one after the run of a millisecond is
    # used up, come from the locked path: still ordered with new_uuid7().
    from sqlalchemy_ulid import _uuid7

    generator = _uuid7._default
    _, base, counter, limit = generator._run
    generator._run = (0, base, counter, limit)  # the next call takes the lock
    first = new_typeid("user")
    second = new_typeid("user")
    assert new_uuid7() > second.uuid > first.uuid


@given(typeid_prefixes)
def test_new_typeid_takes_every_valid_prefix(prefix: str) -> None:
    typeid = new_typeid(prefix)
    assert TypeID.parse(str(typeid)) == typeid
    assert typeid.prefix == prefix


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("User", "uppercase 'U'"),
        ("user_", "ends with '_'"),
        ("_user", "starts with '_'"),
        ("us3r", "invalid character '3'"),
        ("a" * 64, "64 characters"),
    ],
)
def test_new_typeid_refuses_a_bad_prefix(prefix: str, message: str) -> None:
    with pytest.raises(InvalidTypeID, match=re.escape(message)):
        new_typeid(prefix)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_repeats_its_parent() -> None:
    parent = [new_typeid("user") for _ in range(50)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        child = [str(new_typeid("user")) for _ in range(50)]
        os.write(write, "\n".join(child).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = [TypeID.parse(line) for line in pipe.read().splitlines()]
    os.waitpid(pid, 0)
    more = [new_typeid("user") for _ in range(50)]
    assert len(child) == 50
    assert not set(child) & set(parent + more)
    assert min(child) > max(parent)


def test_typed_ids_need_neither_sqlalchemy_nor_pydantic() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from sqlalchemy_ulid import TypeID, new_typeid\n"
        "t = new_typeid('user'); TypeID.parse(str(t)); t.uuid; t.to_ulid()\n"
        "roots = {name.split('.')[0] for name in sys.modules}\n"
        "print(sorted(roots & {'pydantic', 'pydantic_core', 'sqlalchemy'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_pickles_and_errors_name_the_package_however_the_module_was_reached() -> None:
    import subprocess
    import sys

    code = (
        "import pickle\n"
        "from sqlalchemy_ulid._typeid import TypeID, InvalidTypeID\n"
        "data = pickle.dumps(TypeID.parse('user_01h455vb4pex5vsknk084sn02q'))\n"
        "print(b'sqlalchemy_ulid._typeid' in data, b'sqlalchemy_ulid' in data)\n"
        "print(InvalidTypeID.__module__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "sqlalchemy_ulid"]
