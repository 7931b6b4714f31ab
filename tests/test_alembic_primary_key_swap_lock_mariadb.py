"""The online key conversion on MariaDB holds every table of the swap, as the script does.

MariaDB commits each DDL statement on its own, so the online swap is a
series of statements, not one transaction: between the catch-up (rows
written since the fill get their new values) and the last ``ALTER TABLE``,
a write from the application would keep its old value only, and lose it at
the swap. The swap therefore takes ``LOCK TABLES ... WRITE`` on every table
before the catch-up, as the ``--sql`` script does, and gives it up at the
end: a writer that comes in that window waits, and writes into the new
columns.

The test writes in that window exactly: when the swap's first ``ALTER
TABLE`` is done (MariaDB committed the catch-up with it), a second session
updates a reference, clears another and inserts a row, each naming the row
it references by a column the swap does not change (so that the same
statement is right before the swap and after it). Every written value
must be there at the end, both ways.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from _sessions import mariadb_held_up, session_id
from test_alembic_primary_key_offline_mariadb import _fresh, _online, _project, maria

__all__ = ["maria"]

#: The writes, each naming what it references by name: right before the swap and after it.
WRITES = (
    "UPDATE pk_orders SET customer_id = (SELECT id FROM pk_customers WHERE name = 'c5') "
    "WHERE note = 'o1'",
    "UPDATE pk_customers SET referrer_id = (SELECT x.id FROM (SELECT id FROM pk_customers "
    "WHERE name = 'c9') AS x) WHERE name = 'c20'",
    "UPDATE pk_customers SET referrer_id = NULL WHERE name = 'c3'",
    "INSERT INTO pk_orders (customer_id, note) SELECT id, 'late' FROM pk_customers "
    "WHERE name = 'c7'",
)


class _Writer:
    """A second session that sends WRITES once, in a thread of its own."""

    def __init__(self, engine: Engine) -> None:
        self.engine = sa.create_engine(engine.url, poolclass=sa.pool.NullPool)
        self.session = 0
        self.held = False
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._write, daemon=True)

    def _write(self) -> None:
        try:
            with self.engine.connect() as conn:
                self.session = session_id(conn)
                self.ready.set()
                for statement in WRITES:
                    conn.exec_driver_sql(statement)
                conn.commit()
        except BaseException as exc:  # handed to the test
            self.error = exc
        finally:
            self.ready.set()

    def start_and_wait(self, monitor: Engine) -> None:
        """Start, then wait until the writes are done or held up by the swap's locks."""
        self.thread.start()
        self.ready.wait(60)
        with monitor.connect() as conn:
            for _ in range(6000):
                if not self.thread.is_alive():
                    return
                state = conn.exec_driver_sql(
                    "SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = %s",
                    (self.session,),
                ).scalar()
                conn.rollback()
                if "lock" in str(state).lower() or mariadb_held_up(conn, self.session):
                    self.held = True
                    return
                self.thread.join(0.01)
        raise AssertionError("the writer neither finished nor waited for a lock")


@pytest.fixture
def writer(maria: Engine) -> Iterator[_Writer]:
    found = _Writer(maria)
    yield found
    found.thread.join(120)
    found.engine.dispose()


def _in_the_window(engine: Engine, writer: _Writer) -> Any:
    """Start the writer once the swap's first ALTER TABLE is done (and the catch-up committed)."""
    fired: list[str] = []
    monitor = sa.create_engine(engine.url, poolclass=sa.pool.NullPool)

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not fired and "FOREIGN KEY" in statement and statement.startswith("ALTER TABLE"):
            fired.append(statement)
            writer.start_and_wait(monitor)

    sa.event.listen(engine, "after_cursor_execute", hook)

    def done() -> list[str]:
        sa.event.remove(engine, "after_cursor_execute", hook)
        monitor.dispose()
        return fired

    return done


def _written(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        orders = dict(
            conn.exec_driver_sql(
                "SELECT o.note, c.name FROM pk_orders o JOIN pk_customers c "
                "ON c.id = o.customer_id WHERE o.note IN ('o1', 'late')"
            ).all()
        )
        referrers = dict(
            conn.exec_driver_sql(
                "SELECT c.name, r.name FROM pk_customers c LEFT JOIN pk_customers r "
                "ON r.id = c.referrer_id WHERE c.name IN ('c3', 'c20')"
            ).all()
        )
    return {"orders": orders, "referrers": referrers}


EXPECTED = {"orders": {"o1": "c5", "late": "c7"}, "referrers": {"c3": None, "c20": "c9"}}


@pytest.mark.parametrize("action", ["upgrade", "downgrade"])
def test_writes_between_catch_up_and_swap_survive(
    maria: Engine, writer: _Writer, tmp_path: Path, action: str
) -> None:
    config = _project(tmp_path, maria, extra="from_time='created_at'")
    _fresh(maria, config)
    if action == "downgrade":
        _online(config, maria, "upgrade", "pk0001")
    done = _in_the_window(maria, writer)
    try:
        _online(config, maria, action, "pk0000" if action == "downgrade" else "pk0001")
    finally:
        fired = done()
    assert fired, "the swap sent no ALTER TABLE ... FOREIGN KEY"
    assert writer.held, "the writer was not held up by the swap: it wrote in the window"
    writer.thread.join(120)
    assert writer.error is None, writer.error
    assert _written(maria) == EXPECTED
