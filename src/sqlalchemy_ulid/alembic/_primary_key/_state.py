"""The stored state of a primary-key conversion in progress (``ulid_key_conversions``).

The plan (:class:`~._plan.Plan`) is stored before the first change, one row
per table with the phases done so far, so that a rerun after a kill
continues the same plan even after foreign keys were dropped. The row goes,
and the table with the last row, when the conversion finishes.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._plan import STATE_TABLE, Plan

__all__ = ["LOCK_OP", "clear_state", "load_state", "lock_target", "mark_done", "save_state"]

#: The run's own lock is this op's for both directions: a conversion and a
#: restore of one table never run at once either.
LOCK_OP = "convert_primary_key_to_ulid"


def lock_target(table: str, schema: str | None) -> str:
    """The target the run's lock is named after (online and in the script): the table."""
    return table if schema is None else f"{schema}.{table}"


def _state_table(schema: str | None) -> sa.Table:
    return sa.Table(
        STATE_TABLE,
        sa.MetaData(),
        sa.Column("name", sa.String(190), primary_key=True),
        sa.Column("plan", sa.Text, nullable=False),
        sa.Column("done", sa.Text, nullable=False),
        schema=schema,
    )


def load_state(
    connection: Connection, schema: str | None, table: str
) -> tuple[Plan, list[str]] | None:
    """The stored plan of a conversion in progress on the table, and its done phases."""
    if not sa.inspect(connection).has_table(STATE_TABLE, schema=schema):
        return None
    state = _state_table(schema)
    row = connection.execute(
        sa.select(state.c.plan, state.c.done).where(state.c.name == table)
    ).first()
    if row is None:
        return None
    return Plan.from_json(row[0]), list(json.loads(row[1]))


def save_state(connection: Connection, plan: Plan) -> None:
    """Store a new plan (creating the table the first time)."""
    state = _state_table(plan.schema)
    state.create(connection, checkfirst=True)
    connection.execute(state.insert().values(name=plan.table, plan=plan.to_json(), done="[]"))


def mark_done(connection: Connection, plan: Plan, done: list[str], name: str) -> None:
    """Record a finished phase or step."""
    done.append(name)
    state = _state_table(plan.schema)
    connection.execute(
        state.update().where(state.c.name == plan.table).values(done=json.dumps(done))
    )


def clear_state(connection: Connection, plan: Plan) -> None:
    """Forget a finished conversion; drop the table when no other is in progress."""
    state = _state_table(plan.schema)
    connection.execute(state.delete().where(state.c.name == plan.table))
    if not connection.scalar(sa.select(sa.func.count()).select_from(state)):
        state.drop(connection)
