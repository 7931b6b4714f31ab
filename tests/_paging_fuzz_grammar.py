"""The paging fuzzer's grammar: the statements it generates (see ``_paging_fuzz.py``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from _paging_fuzz_data import Schema
from sqlalchemy_ulid import ULID


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


def _eager_collection(
    rng: random.Random, db: Schema
) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    """contains_eager() of a collection: a row per child (refused: the LIMIT counts children)."""
    from sqlalchemy.orm import contains_eager

    Customer = db.Customer  # noqa: N806 (a mapped class)
    orders = Customer.orders  # type: ignore[attr-defined]
    stmt = sa.select(Customer).join(orders).options(contains_eager(orders))
    pool = [(Customer.name, False), (Customer.tier, True)]  # type: ignore[attr-defined]
    return "eager-collection", stmt, _keys(rng, pool, Customer.id), Customer.id, True  # type: ignore[attr-defined]


def _distinct_join(
    rng: random.Random, db: Schema
) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    """SELECT DISTINCT customer ids over their orders, sorted by keys not selected.

    A customer's own columns page (one value per id); an order's would be
    read as an extra column that splits a customer into a row per value:
    refused. (Not on PostgreSQL, which refuses the unpaged statement.)
    """
    o, c = db.orders, db.customers
    stmt = sa.select(c.c.id.label("pid")).join(o, o.c.customer_id == c.c.id).distinct()
    pool = [(c.c.name, False), (c.c.tier, True)]
    if rng.random() < 0.5:
        pool = [(o.c.n, False), (o.c.x, True), (c.c.name, False)]
    return "distinct-join", stmt, _keys(rng, pool, c.c.id), c.c.id, False


def _same_label(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    """Two selected columns under one label, sorted by one: ORDER BY k is ambiguous (refused)."""
    o = db.orders
    first, second = o.c.n.label("k"), sa.func.lower(o.c.s).label("k")
    keys = [Key(first, descending=rng.random() < 0.5), Key(second, descending=rng.random() < 0.5)]
    rng.shuffle(keys)
    stmt = sa.select(o.c.id.label("pid"), first, second)
    return "same-label", stmt, [keys[0], _id_key(rng, o.c.id)], o.c.id, False


def _constant(rng: random.Random, db: Schema) -> tuple[str, sa.Select[Any], list[Key], Any, bool]:
    """A constant sort key: ``ORDER BY 1`` on MariaDB (inlined) or SQLite (true): refused."""
    o = db.orders
    stmt = sa.select(o.c.id.label("pid"), o.c.n)
    value = rng.choice([sa.literal(1), sa.literal(2), sa.literal(True), sa.true()])
    keys = [Key(value, descending=rng.random() < 0.5)]
    keys += [_direction(rng, Key(o.c.x), True)] if rng.random() < 0.5 else []
    return "constant", stmt, [*keys, _id_key(rng, o.c.id)], o.c.id, False


_SHAPES: list[tuple[Callable[..., Any], int]] = [
    (_constant, 1),
    (_eager_collection, 1),
    (_distinct_join, 2),
    (_same_label, 1),
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
    if shape in ("distinct-join", "same-label", "constant"):
        only = ("sqlite", "mysql")  # PostgreSQL refuses the unpaged statement
    ident: Callable[[Any], Any] = _row_id
    if orm:
        width = len(stmt.column_descriptions)
        ident = (lambda item: item.id) if width == 1 else (lambda row: row[0].id)
    size = rng.choice([1, 1, 2, 3, 4, 7])
    orm = orm or rng.random() < 0.3  # Core statements run on a Session too
    return Case(shape, stmt, keys, column, ident, orm, size, rng.random() < 0.5, only)
