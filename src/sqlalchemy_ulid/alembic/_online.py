"""What every op that commits phase by phase needs from Alembic's context.

:func:`check_online_context` refuses, before any SQL, a connection in a
transaction Alembic did not begin; :func:`phases_block` is Alembic's
``autocommit_block()`` that reports the error which stopped the phases.
The ops with ``online=True`` use them (``_add/plan.py``, ``_storage``,
``_primary_key``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import sqlalchemy as sa
from alembic.operations import Operations
from alembic.util import CommandError

__all__ = ["check_online_context", "phases_block"]


def check_online_context(operations: Operations, op_name: str = "add_ulid_column") -> None:
    """Refuse, before any SQL, a migration context where phases cannot commit.

    ``autocommit_block()`` commits the transaction Alembic began. A
    connection handed to Alembic inside a transaction of the caller's own
    cannot be committed by Alembic: refuse rather than commit it.
    """
    context = operations.get_context()
    if context.as_sql:
        return
    # Alembic's own bookkeeping: the transaction it began (None: not its own).
    own = getattr(context, "_transaction", None)
    if context._in_connection_transaction() and own is None:
        raise CommandError(
            f"{op_name}(online=True) commits after each phase, through Alembic's "
            "autocommit_block(), but the connection is in a transaction that Alembic did "
            "not begin. Run it from env.py's context.begin_transaction() (the usual "
            "env.py), on a connection with no transaction of your own."
        )


@contextlib.contextmanager
def phases_block(operations: Operations) -> Iterator[None]:
    """Alembic's ``autocommit_block()``, for phases that commit on their own.

    With the session gone (killed, a failover), Alembic cannot commit the
    block's transaction as it leaves it; the error of that commit would hide
    the one that stopped the phases, so that one is raised instead.
    """
    failure: list[BaseException] = []
    try:
        with operations.get_context().autocommit_block():
            try:
                yield
            except BaseException as exc:
                failure.append(exc)
                raise
    except sa.exc.SQLAlchemyError as exc:
        if failure and exc is not failure[0]:
            raise failure[0] from None
        raise
