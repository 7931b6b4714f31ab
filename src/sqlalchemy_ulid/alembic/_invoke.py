"""Run an op from its public method, passing the method's arguments on once.

Each public method (``op.add_ulid_column(...)``) spells out its signature,
which Alembic copies onto ``op``, and the op's constructor takes the same
parameters: the method hands its arguments on by name instead of listing
every one of them again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from alembic.operations import MigrateOperation, Operations

__all__ = ["invoke"]

#: the public method's own parameters, not the op's
_NOT_OPTIONS = ("cls", "operations")


def invoke(
    op_class: Callable[..., MigrateOperation], operations: Operations, arguments: Mapping[str, Any]
) -> Any:
    """Build the op from a public method's ``locals()`` (taken first thing) and run it.

    Example:
        >>> from alembic.operations import MigrateOperation
        >>> class Op(MigrateOperation):
        ...     def __init__(self, table_name: str, *, schema: str | None = None) -> None:
        ...         self.table_name, self.schema = table_name, schema
        >>> class Operations:
        ...     def invoke(self, op: Op) -> str:
        ...         return f"{op.schema}.{op.table_name}"
        >>> def drop_table(operations, table_name, *, schema=None):
        ...     return invoke(Op, operations, locals())
        >>> drop_table(Operations(), "orders", schema="shop")
        'shop.orders'
    """
    options = {name: value for name, value in arguments.items() if name not in _NOT_OPTIONS}
    return operations.invoke(op_class(**options))
