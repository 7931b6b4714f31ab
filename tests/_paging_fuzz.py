"""A differential fuzzer of ``paginate()``: generated statements against the unpaged query.

A seeded generator builds statements from a small grammar over two tables
(orders with nullable and NOT NULL columns, customers they may or may not
join): plain keys, expression keys (``coalesce``, ``CASE``, ``lower``,
arithmetic), inner and outer joins at the top and inside subqueries and
CTEs, unions whose branches differ in nullability, GROUP BY with aggregate
keys, window keys, DISTINCT (and DISTINCT ON on PostgreSQL), lossy keys
(``Numeric(asdecimal=False)``), interval keys, ORM entity keys from an
outer-joined entity; one to three sort keys before the paging column, in
random directions and NULL placements. The data has ties, NULLs and
duplicates.

For each statement :func:`check` walks every page forward and then backward at
a random page size, passing the cursors on as text (as from a URL) or, for
a bare id, as the ULID itself, and compares the rows with the unpaged
statement (the oracle: the database's own order). The only other accepted
outcome is a refusal: a ``ValueError`` raised by the first call before any
SQL ran (an engine listener counts the statements).

Each case is named by its ``shape`` (the feature it exercises) and
reproduces from ``(seed, index)``: :func:`case` builds the same statement
and page size from them, on the data :func:`rows` makes from the seed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import random
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, registry

from sqlalchemy_ulid import ULID, ULIDType, paginate

MS = 1_712_345_678_901

#: what a case can end as; everything but "ok" and "refused" is a failure
FAILURES = ("crash", "late-refusal", "endless", "lost", "repeated", "extra", "misordered")


class _Tagged(sa.types.TypeDecorator[str]):
    """Text stored with a prefix its bind adds, and no result processing: read as stored."""

    impl = sa.String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return None if value is None else f"t{value}"


@dataclass
class Schema:
    """The fuzzer's tables (under names of their own) and their mapped classes."""

    metadata: sa.MetaData
    orders: sa.Table
    customers: sa.Table
    lossy: sa.Table  # the orders table again, its `d` read as floats
    Order: type
    Customer: type


def schema(token: str) -> Schema:
    """Tables named after ``token`` (unique per run), and classes mapped on them."""
    metadata = sa.MetaData()
    orders = sa.Table(
        f"fz_{token}_o",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("customer_id", ULIDType(), nullable=True),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("x", sa.Integer, nullable=True),
        sa.Column("s", sa.String(8), nullable=True),
        sa.Column("d", sa.Numeric(30, 20), nullable=False),
        sa.Column("wait", sa.Interval, nullable=False),
        sa.Column("f", sa.Double, nullable=True),
        sa.Column("p", sa.Numeric(10, 2), nullable=False),
        sa.Column("at", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()),
        sa.Column("tag", _Tagged(8), nullable=False),
    )
    customers = sa.Table(
        f"fz_{token}_c",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("name", sa.String(8), nullable=False),
        sa.Column("tier", sa.Integer, nullable=True),
    )
    lossy = sa.Table(
        f"fz_{token}_o",
        sa.MetaData(),
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("d", sa.Numeric(30, 20, asdecimal=False), nullable=False),
    )
    mapper = registry()
    order_class = type(f"Order_{token}", (), {})
    customer_class = type(f"Customer_{token}", (), {})
    mapper.map_imperatively(order_class, orders)
    mapper.map_imperatively(customer_class, customers)
    return Schema(metadata, orders, customers, lossy, order_class, customer_class)


def rows(seed: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The data of a seed: customers and orders, with ties, NULLs and duplicates."""
    rng = random.Random(f"{seed}:data")
    customers = [
        {
            "id": ULID.from_parts(MS + k, rng.getrandbits(80)),
            "name": rng.choice(["ann", "bob", "Bob", "cy"]),
            "tier": rng.choice([None, 1, 2]),
        }
        for k in range(rng.randint(3, 6))
    ]
    absent = ULID.from_parts(MS + 99, 0)  # an order whose customer is missing
    orders = []
    for k in range(rng.randint(12, 30)):
        orders.append(
            {
                "id": ULID.from_parts(MS + k // 3, rng.getrandbits(80)),
                "customer_id": rng.choice([None, absent, *[c["id"] for c in customers]]),
                "n": rng.randint(0, 3),
                "x": rng.choice([None, None, 0, 1, 2]),
                "s": rng.choice([None, "a", "A", "b", "bb"]),
                # equal as doubles, different as decimals
                "d": Decimal("1.000000000000000000" + str(rng.randint(10, 13))),
                "wait": timedelta(days=rng.randint(0, 2), microseconds=rng.choice([0, 250000])),
                "f": rng.choice([None, 0.5, 1.0, 1.5, 2.25]),
                "p": Decimal(rng.choice(["0.99", "1.00", "1.01", "1.02"])),
                "tag": rng.choice(["a", "b", "c"]),
            }
        )
    return customers, orders


@contextlib.contextmanager
def tables(engine: Engine, token: str, seed: str) -> Iterator[Schema]:
    """Create the tables, fill them with the seed's data, drop them after (failed or not)."""
    made = schema(token)
    made.metadata.drop_all(engine)
    made.metadata.create_all(engine)
    try:
        customers, orders = rows(seed)
        with engine.begin() as conn:
            conn.execute(made.customers.insert(), customers)
            conn.execute(made.orders.insert(), orders)
        yield made
    finally:
        made.metadata.drop_all(engine)


# -- the grammar ------------------------------------------------------------------


@dataclass
class Key:
    """A sort key: its expression, direction and NULL placement (None: the database's)."""

    expr: Any
    descending: bool = False
    nulls: str | None = None

    def order(self) -> Any:
        clause = self.expr.desc() if self.descending else self.expr.asc()
        if self.nulls == "first":
            return clause.nulls_first()
        if self.nulls == "last":
            return clause.nulls_last()
        return clause

    def oracle(self) -> list[Any]:
        """The same order without NULLS FIRST/LAST, which MariaDB lacks."""
        clause = self.expr.desc() if self.descending else self.expr.asc()
        if self.nulls is None:
            return [clause]
        is_null = self.expr.is_(None)
        return [is_null.asc() if self.nulls == "last" else is_null.desc(), clause]


@dataclass
class Case:
    """One generated statement and how to walk it."""

    shape: str
    select: sa.Select[Any]  # without ORDER BY
    keys: list[Key]  # the paging column's key last
    column: Any
    ident: Callable[[Any], Any]  # an item of a page (or a row of the oracle) -> its id
    orm: bool
    size: int
    as_text: bool  # pass bare-id cursors as text
    only: tuple[str, ...] = ()  # the backends it applies to (empty: all)

    @property
    def statement(self) -> sa.Select[Any]:
        return self.select.order_by(*(key.order() for key in self.keys))

    @property
    def oracle(self) -> sa.Select[Any]:
        return self.select.order_by(*(part for key in self.keys for part in key.oracle()))


def _direction(rng: random.Random, key: Key, nullable: bool) -> Key:
    key.descending = rng.random() < 0.5
    if nullable:
        key.nulls = rng.choice([None, None, "first", "last"])
    return key


def _id_key(rng: random.Random, column: Any) -> Key:
    return Key(column, descending=rng.random() < 0.5)


def _keys(rng: random.Random, pool: list[tuple[Any, bool]], column: Any) -> list[Key]:
    """One to three keys from ``pool`` ((expression, may be NULL)), then the paging column."""
    chosen = rng.sample(pool, k=min(len(pool), rng.randint(1, 3)))
    return [_direction(rng, Key(expr), nullable) for expr, nullable in chosen] + [
        _id_key(rng, column)
    ]


def _row_id(row: Any) -> Any:
    return row if isinstance(row, ULID) else row.pid  # (one column selected: the id itself)


def _expressions(o: Any) -> list[tuple[Any, bool]]:
    """Key expressions over the orders table, and whether each may be NULL."""
    return [
        (o.c.n, False),
        (o.c.x, True),
        (o.c.s, True),
        (o.c.d, False),
        (sa.func.coalesce(o.c.x, -1), False),
        (sa.func.coalesce(o.c.x, o.c.n), False),
        (sa.case((o.c.x > 0, o.c.n), else_=sa.null()), True),
        (sa.case((o.c.x > 0, o.c.n), else_=o.c.n + 10), False),
        (sa.func.lower(o.c.s), True),
        (o.c.n + o.c.x, True),
    ]


def _plain(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    o = db.orders
    pool = _expressions(o)
    keys = _keys(rng, pool, o.c.id)
    labelled = [key.expr.label(f"k{n}") for n, key in enumerate(keys[:-1])]
    stmt = sa.select(o.c.id.label("pid"), *labelled)
    if rng.random() < 0.3 and not any(key.nulls for key in keys):
        # (PostgreSQL: under DISTINCT, the oracle's `IS NULL` keys must be selected)
        stmt = stmt.distinct()
    return "plain", stmt, keys, o.c.id, False


def _joined(o: Any, c: Any, outer: bool) -> sa.Select[Any]:
    stmt = sa.select(
        o.c.id.label("pid"),
        o.c.n.label("n"),
        o.c.x.label("x"),
        o.c.s.label("s"),
        c.c.name.label("cname"),
        c.c.tier.label("tier"),
        sa.func.coalesce(c.c.name, "zz").label("cz"),
    )
    condition = o.c.customer_id == c.c.id
    return stmt.outerjoin(c, condition) if outer else stmt.join(c, condition)


def _join_top(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    o, c = db.orders, db.customers
    outer = rng.random() < 0.7
    stmt = _joined(o, c, outer)
    pool = [(c.c.name, outer), (c.c.tier, True), (o.c.n, False), (o.c.x, True)]
    pool.append((sa.func.coalesce(c.c.name, "zz"), False))
    return "join-top", stmt, _keys(rng, pool, o.c.id), o.c.id, False


def _join_nested(
    rng: random.Random, db: Schema
) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    o, c = db.orders, db.customers
    outer = rng.random() < 0.8
    inner = _joined(o, c, outer)
    if rng.random() < 0.3:  # one level deeper
        inner = sa.select(inner.subquery("deeper"))
    sub = inner.cte(f"j{rng.randint(0, 999)}") if rng.random() < 0.5 else inner.subquery()
    pool = [(sub.c.cname, outer), (sub.c.tier, True), (sub.c.n, False), (sub.c.cz, False)]
    pool.append((sub.c.s, True))
    stmt = sa.select(sub)
    return "join-nested", stmt, _keys(rng, pool, sub.c.pid), sub.c.pid, False


def _union(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    o = db.orders
    split = rng.randint(0, 3)
    low = sa.select(o.c.id.label("pid"), o.c.n.label("v"), o.c.s.label("w")).where(o.c.n < split)
    high = sa.select(o.c.id.label("pid"), o.c.x.label("v"), o.c.s.label("w")).where(o.c.n >= split)
    branches = [low, high]
    rng.shuffle(branches)
    union = sa.union_all(*branches) if rng.random() < 0.7 else sa.union(*branches)
    sub = union.cte(f"u{rng.randint(0, 999)}") if rng.random() < 0.3 else union.subquery()
    pool = [(sub.c.v, True), (sub.c.w, True)]
    return "union", sa.select(sub), _keys(rng, pool, sub.c.pid), sub.c.pid, False


def _group(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    o, c = db.orders, db.customers
    spent = sa.func.sum(o.c.n).label("spent")
    count = sa.func.count(o.c.id).label("many")
    top = sa.func.max(o.c.x).label("top")
    stmt = (
        sa.select(c.c.id.label("pid"), c.c.name.label("cname"), spent, count, top)
        .join(o, o.c.customer_id == c.c.id)
        .group_by(c.c.id, c.c.name)
    )
    if rng.random() < 0.3:  # grouped by the paging column: unique in the result
        stmt = sa.select(o.c.customer_id.label("pid"), spent, count).group_by(o.c.customer_id)
        keys = [Key(rng.choice([spent, count]), descending=rng.random() < 0.5)]
        return (
            "group-aggregate",
            stmt,
            [*keys, _id_key(rng, o.c.customer_id)],
            o.c.customer_id,
            False,
        )
    pool = [(spent, False), (count, False), (top, True), (c.c.name, False)]
    chosen = rng.sample(pool, k=rng.randint(1, 2))
    keys = [Key(expr, descending=rng.random() < 0.5) for expr, _ in chosen]
    return "group-aggregate", stmt, [*keys, _id_key(rng, c.c.id)], c.c.id, False


def _window(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    o = db.orders
    number = sa.func.row_number().over(order_by=(o.c.n, o.c.id)).label("rn")
    running = sa.func.sum(o.c.n).over(partition_by=o.c.customer_id).label("per")
    stmt = sa.select(o.c.id.label("pid"), o.c.n, number, running)
    chosen = rng.sample([number, running], k=rng.randint(1, 2))
    keys = [Key(expr, descending=rng.random() < 0.5) for expr in chosen]
    return "window", stmt, [*keys, _id_key(rng, o.c.id)], o.c.id, False


def _distinct_on_n(stmt: sa.Select[Any], expr: Any) -> sa.Select[Any]:
    """``SELECT DISTINCT ON (expr)``: an extension in SQLAlchemy 2.1, a method before."""
    try:
        from sqlalchemy.dialects.postgresql import distinct_on
    except ImportError:  # SQLAlchemy 2.0
        return stmt.distinct(expr)
    return stmt.ext(distinct_on(expr))


def _distinct_on(
    rng: random.Random, db: Schema
) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    o = db.orders
    stmt = _distinct_on_n(sa.select(o.c.id.label("pid"), o.c.n, o.c.x), o.c.n)
    keys = [Key(o.c.n, descending=rng.random() < 0.5), Key(o.c.x, descending=rng.random() < 0.5)]
    return "distinct-on", stmt, [*keys, _id_key(rng, o.c.id)], o.c.id, False


def _entity_outer(
    rng: random.Random, db: Schema
) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    Order, Customer = db.Order, db.Customer  # noqa: N806 (mapped classes)
    condition = Order.customer_id == Customer.id  # type: ignore[attr-defined]
    if rng.random() < 0.7:
        stmt = sa.select(Order, Customer).outerjoin(Customer, condition)
    else:
        stmt = sa.select(Order).outerjoin(Customer, condition)
    pool = [(Customer.name, True), (Customer.tier, True), (Order.n, False)]  # type: ignore[attr-defined]
    return "entity-outer", stmt, _keys(rng, pool, Order.id), Order.id, True  # type: ignore[attr-defined]


def _lossy(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    o = db.lossy
    stmt = sa.select(o.c.id.label("pid"), o.c.d)
    keys = [Key(o.c.d, descending=rng.random() < 0.5), _id_key(rng, o.c.id)]
    return "lossy-numeric", stmt, keys, o.c.id, False


def _interval(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    o = db.orders
    stmt = sa.select(o.c.id.label("pid"), o.c.wait)
    keys = [Key(o.c.wait, descending=rng.random() < 0.5), _id_key(rng, o.c.id)]
    return "interval", stmt, keys, o.c.id, False


def _mixed(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    """Keys whose SQL type is not their first argument's (an integer or NUMERIC, and a double)."""
    o = db.orders
    pool = [
        (sa.func.coalesce(o.c.x, o.c.f), True),
        (sa.func.coalesce(o.c.f, o.c.n), False),
        (o.c.p + o.c.f, True),
        (o.c.p * o.c.f, True),
        (o.c.p / 3, False),
        (o.c.n + o.c.f, True),
        (sa.case((o.c.x > 0, o.c.n), else_=o.c.f), True),
    ]
    keys = _keys(rng, pool, o.c.id)
    labelled = [key.expr.label(f"k{n}") for n, key in enumerate(keys[:-1])]
    if rng.random() < 0.5:
        return "mixed-type", sa.select(o.c.id.label("pid"), *labelled), keys, o.c.id, False
    return "mixed-type", sa.select(o.c.id.label("pid")), keys, o.c.id, False


def _position(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    """ORDER BY a select-list position (``ORDER BY 2``), which no WHERE can compare."""
    o = db.orders
    spot = sa.literal_column(str(rng.randint(2, 3)), sa.Integer)
    if rng.random() < 0.5:  # an entity: its columns are the select list
        Order = db.Order  # noqa: N806 (a mapped class)
        keys = [Key(spot, descending=rng.random() < 0.5), _id_key(rng, Order.id)]  # type: ignore[attr-defined]
        return "position", sa.select(Order), keys, Order.id, True  # type: ignore[attr-defined]
    stmt = sa.select(o.c.id.label("pid"), o.c.n.label("n"), o.c.x.label("x"))
    keys = [Key(spot, descending=rng.random() < 0.5), _id_key(rng, o.c.id)]
    return "position", stmt, keys, o.c.id, False


def _stored(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    """Keys compared as stored: a server-default timestamp, a bind-only TypeDecorator."""
    o = db.orders
    pool = [(o.c.at, False), (o.c.tag, False), (o.c.p, False), (sa.func.lower(o.c.tag), False)]
    keys = _keys(rng, pool, o.c.id)
    if rng.random() < 0.5:
        labelled = [key.expr.label(f"k{n}") for n, key in enumerate(keys[:-1])]
        return "stored-form", sa.select(o.c.id.label("pid"), *labelled), keys, o.c.id, False
    return "stored-form", sa.select(o.c.id.label("pid")), keys, o.c.id, False


def _epoch(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    """extract('epoch', ...) keys: fractional seconds, typed Integer by SQLAlchemy."""
    o = db.orders
    pool = [(sa.extract("epoch", o.c.wait), False), (sa.extract("epoch", o.c.at), False)]
    keys = _keys(rng, pool, o.c.id)
    if rng.random() < 0.5:
        labelled = [key.expr.label(f"k{n}") for n, key in enumerate(keys[:-1])]
        return "epoch", sa.select(o.c.id.label("pid"), *labelled), keys, o.c.id, False
    return "epoch", sa.select(o.c.id.label("pid")), keys, o.c.id, False


def _entity_keys(
    rng: random.Random, db: Schema
) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    """Entities and columns selected together, keys mapped by an entity but not selected."""
    from sqlalchemy.orm import defer

    Order, Customer = db.Order, db.Customer  # noqa: N806 (mapped classes)
    condition = Order.customer_id == Customer.id  # type: ignore[attr-defined]
    stmt = sa.select(Order, Customer.name).join(Customer, condition)
    if rng.random() < 0.5:
        stmt = stmt.options(defer(Order.n, raiseload=True))  # type: ignore[attr-defined]
    pool = [(Order.n, False), (Order.x, True), (Order.p, False)]  # type: ignore[attr-defined]
    return "entity-keys", stmt, _keys(rng, pool, Order.id), Order.id, True  # type: ignore[attr-defined]


_SHAPES: list[tuple[Callable[..., Any], int]] = [
    (_mixed, 3),
    (_position, 1),
    (_stored, 2),
    (_epoch, 1),
    (_entity_keys, 2),
    (_plain, 5),
    (_join_top, 3),
    (_join_nested, 5),
    (_union, 4),
    (_group, 2),
    (_window, 2),
    (_distinct_on, 1),
    (_entity_outer, 3),
    (_lossy, 1),
    (_interval, 1),
]


def case(seed: str, index: int, db: Schema) -> Case:
    """The case ``index`` of ``seed``: the same statement and page size every time."""
    rng = random.Random(f"{seed}:{index}")
    make = rng.choices([s for s, _ in _SHAPES], weights=[w for _, w in _SHAPES])[0]
    shape, stmt, keys, column, orm = make(rng, db)
    only = ("postgresql",) if shape in ("distinct-on", "epoch") else ()
    ident: Callable[[Any], Any] = _row_id
    if orm:
        width = len(stmt.column_descriptions)
        ident = (lambda item: item.id) if width == 1 else (lambda row: row[0].id)
    size = rng.choice([1, 1, 2, 3, 4, 7])
    orm = orm or rng.random() < 0.3  # Core statements run on a Session too
    return Case(shape, stmt, keys, column, ident, orm, size, rng.random() < 0.5, only)


# -- walking a case ---------------------------------------------------------------


@dataclass
class Outcome:
    """How a case ended: "ok", "refused" or one of FAILURES, and what was seen."""

    kind: str
    detail: str = ""
    direction: str = ""


@dataclass
class _Counter:
    statements: int = 0

    def __call__(self, *args: Any) -> None:
        self.statements += 1


class _Failed(Exception):
    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


def _cursor(value: Any, as_text: bool) -> Any:
    if isinstance(value, str) and not as_text and len(value) == 26:
        with contextlib.suppress(ValueError):
            return ULID(value)  # a bare id, handed back as the ULID
    return str(value)


def _compare(got: list[Any], want: list[Any], direction: str) -> Outcome | None:
    if got == want:
        return None
    have, need = Counter(got), Counter(want)
    lost = need - have
    repeated = [k for k, v in have.items() if v > 1]
    extra = have - need
    detail = f"{len(want)} rows expected, {len(got)} returned"
    if lost:
        return Outcome("lost", f"{detail}; lost {sorted(map(str, lost))[:6]}", direction)
    if repeated:
        return Outcome(
            "repeated", f"{detail}; repeated {sorted(map(str, repeated))[:6]}", direction
        )
    if extra:
        return Outcome(
            "extra", f"{detail}; not in the oracle {sorted(map(str, extra))[:6]}", direction
        )
    return Outcome("misordered", detail, direction)


def _call(counter: _Counter, first: bool, direction: str, fetch: Callable[[], Any]) -> Any:
    before = counter.statements
    try:
        page = fetch()
        _ = page.cursors  # made lazily: a failure there is the call's too
        return page
    except ValueError as exc:
        if first and counter.statements == before:
            raise
        ran = counter.statements - before
        raise _Failed(
            Outcome("late-refusal", f"{type(exc).__name__}: {exc} (after {ran} SQL)", direction)
        ) from exc
    except Exception as exc:  # a crash after SQL is exactly what the fuzzer is after
        raise _Failed(Outcome("crash", f"{type(exc).__name__}: {exc}"[:400], direction)) from exc


#: numbers no row holds, as a forged cursor may carry them
_FORGED = [["d", "NaN"], ["d", "Infinity"], ["d", "-Infinity"], ["f", "inf"], ["f", "nan"],
           ["d", "9" * 40], ["d", "0." + "1" * 40], ["d", "1E+400"], ["i", "9" * 30]]  # fmt: skip


def _forgeries(cursor: str) -> Iterator[str]:
    """The cursor with each of its numbers replaced by one that no row can hold."""
    from sqlalchemy_ulid._paging._cursor import _CHECK, _FINGERPRINT, _b64, _check

    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    head = raw[: 1 + _FINGERPRINT]
    typed = json.loads(raw[1 + _FINGERPRINT + _CHECK :])
    for index, (tag, _) in enumerate(typed[:-1]):
        if tag not in ("i", "f", "d"):
            continue
        for forged in _FORGED:
            body = json.dumps([*typed[:index], forged, *typed[index + 1 :]]).encode()
            yield _b64(head + _check(head, body) + body)


def _forge(the: Case, session: Any, counter: _Counter, cursor: str) -> Outcome | None:
    """Forged numbers in a real cursor: a page, or a refusal before any SQL."""
    stmt = the.statement
    for forged in _forgeries(cursor):
        for way in ("after", "before"):
            try:
                _call(
                    counter,
                    True,
                    f"forged {way}",
                    lambda f=forged, w=way: paginate(
                        session, stmt, the.column, limit=the.size, **{w: f}
                    ),
                )
            except _Failed as failed:
                failed.outcome.detail += f" (cursor {forged})"
                return failed.outcome
            except ValueError:
                pass  # refused before any SQL
    return None


def _walk(the: Case, session: Any, counter: _Counter, oracle: list[Any]) -> Outcome:
    stmt = the.statement
    got: list[Any] = []
    cursor = None
    last = None
    for step in range(len(oracle) + 3):
        page = _call(
            counter,
            step == 0,
            "forward",
            lambda c=cursor: paginate(session, stmt, the.column, after=c, limit=the.size),
        )
        got += [the.ident(item) for item in page.items]
        if page.items:
            last = page.cursors[-1]
        if page.next_cursor is None:
            break
        cursor = _cursor(page.next_cursor, the.as_text)
    else:
        return Outcome("endless", f"{len(got)} rows in {len(oracle) + 3} pages", "forward")
    wrong = _compare(got, oracle, "forward")
    if wrong is not None or last is None:
        return wrong or Outcome("ok")
    if len(the.keys) > 1 and isinstance(last, str):
        forged = _forge(the, session, counter, last)
        if forged is not None:
            return forged
    # Backward from the last row's cursor: every row before it.
    chunks: list[list[Any]] = []
    cursor = _cursor(last, the.as_text)
    for _ in range(len(oracle) + 3):
        page = _call(
            counter,
            False,
            "backward",
            lambda c=cursor: paginate(session, stmt, the.column, before=c, limit=the.size),
        )
        chunks.append([the.ident(item) for item in page.items])
        if page.prev_cursor is None:
            break
        cursor = _cursor(page.prev_cursor, the.as_text)
    else:
        return Outcome("endless", f"{len(oracle) + 3} pages", "backward")
    back = [row for chunk in reversed(chunks) for row in chunk]
    return _compare(back, oracle[:-1], "backward") or Outcome("ok")


def check(engine: Engine, the: Case) -> Outcome:
    """Walk ``the`` case forward and backward; compare with the unpaged statement."""
    counter = _Counter()
    sa.event.listen(engine, "before_cursor_execute", counter)
    try:
        with contextlib.ExitStack() as stack:
            if the.orm:
                session: Any = stack.enter_context(Session(engine))
            else:
                session = stack.enter_context(engine.connect())
            scalar = (
                len(the.select.column_descriptions) == 1
                if the.orm
                else len(the.select.selected_columns) == 1
            )
            result = session.execute(the.oracle)
            found = result.scalars().all() if scalar else result.all()
            # Rows whose paging column is NULL are never paged (documented).
            oracle = [i for i in map(the.ident, found) if i is not None]
            try:
                return _walk(the, session, counter, oracle)
            except _Failed as failed:
                return failed.outcome
            except ValueError as exc:  # the first call, before any SQL
                return Outcome("refused", f"{type(exc).__name__}: {exc}")
    finally:
        sa.event.remove(engine, "before_cursor_execute", counter)


def sql_of(engine: Engine, stmt: sa.Select[Any]) -> str:
    """The statement's SQL on ``engine``, values inlined where they can be."""
    try:
        return str(stmt.compile(engine, compile_kwargs={"literal_binds": True}))
    except Exception:
        return str(stmt.compile(engine))


@dataclass
class Report:
    """Counts per shape and outcome, and a reproduction of each failure."""

    backend: str
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def add(self, engine: Engine, seed: str, index: int, the: Case, outcome: Outcome) -> None:
        self.counts[the.shape, outcome.kind] += 1
        if outcome.kind in FAILURES:
            self.failures.append(
                f"--- {self.backend} seed={seed!r} case={index} shape={the.shape} "
                f"size={the.size} {'Session' if the.orm else 'Connection'}: "
                f"{outcome.kind} {outcome.direction}: {outcome.detail}\n"
                f"    rerun: SQLALCHEMY_ULID_FUZZ_SEED={seed} (case {index})\n"
                f"    {sql_of(engine, the.statement)}"
            )

    def table(self) -> str:
        shapes = sorted({shape for shape, _ in self.counts})
        kinds = ["ok", "refused", *FAILURES]
        lines = [f"{self.backend}: " + " ".join(f"{k:>12}" for k in ["shape", *kinds])]
        for shape in shapes:
            cells = [f"{self.counts[shape, k]:>12}" for k in kinds]
            lines.append(f"{self.backend}: {shape:>12} " + " ".join(cells))
        return "\n".join(lines)


def fresh_seed() -> str:
    return f"{uuid.uuid4().int % 10**8:08d}"
