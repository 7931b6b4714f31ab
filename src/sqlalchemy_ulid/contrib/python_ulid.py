"""python-ulid objects both ways: bind them (always worked), or read them back.

``ULIDType`` binds any object with 16 ``.bytes``, python-ulid's ``ULID``
included, and returns our :class:`~sqlalchemy_ulid.ULID`. Apps whose
pydantic models are typed with python-ulid's ``ULID`` can declare the
column as :class:`PythonULIDType` instead, which returns python-ulid
objects; the default ``ULIDType`` path is untouched. Install with
``pip install 'sqlalchemy-ulid[python-ulid]'``.

Example:
    >>> import sqlalchemy as sa
    >>> import ulid
    >>> from sqlalchemy_ulid.contrib.python_ulid import PythonULIDType, new_python_ulid
    >>> t = sa.Table("pu_doc", sa.MetaData(),
    ...              sa.Column("id", PythonULIDType(), primary_key=True, default=new_python_ulid))
    >>> engine = sa.create_engine("sqlite://")
    >>> t.metadata.create_all(engine)
    >>> with engine.begin() as conn:
    ...     _ = conn.execute(t.insert(), [{}, {"id": ulid.ULID()}])
    ...     rows = conn.scalars(sa.select(t.c.id)).all()
    >>> [type(row).__module__ for row in rows]
    ['ulid', 'ulid']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal
from uuid import UUID

from sqlalchemy.engine import Dialect

from . import _missing

try:
    from ulid import ULID as PyULID  # noqa: N811 - a distinct name beside our ULID
except ModuleNotFoundError as exc:
    raise _missing("python_ulid", "python-ulid", exc) from exc

from .._generator import new_ulid
from .._types import Storage, ULIDType, to_bytes

__all__ = ["PythonULIDType", "new_python_ulid", "render_item", "to_python_ulid"]


def new_python_ulid() -> PyULID:
    """Return a new python-ulid ``ULID`` from our generator.

    The id comes from :func:`sqlalchemy_ulid.new_ulid`, so it keeps its
    guarantees (monotonic across threads, fork-safe, ordered across clock
    steps back); only the wrapper is python-ulid's. Use it as the column
    default of a :class:`PythonULIDType` primary key.
    """
    return PyULID(new_ulid().bytes)


def to_python_ulid(value: Any) -> PyULID:
    """Return python-ulid's ``ULID`` for anything that names a ULID.

    Accepts our :class:`~sqlalchemy_ulid.ULID`, python-ulid's, the 26-character
    text (strictly parsed), a :class:`uuid.UUID` or 16 bytes.

    Raises:
        InvalidULID: the value has the right type but is not a ULID.
        TypeError: the value's type never names a ULID.

    Example:
        >>> from sqlalchemy_ulid import ULID
        >>> to_python_ulid(ULID("01HTQW311N1KR5G0Y75M3EF00H"))
        ULID(01HTQW311N1KR5G0Y75M3EF00H)
    """
    if type(value) is PyULID:
        return value
    return PyULID(to_bytes(value))


class PythonULIDType(ULIDType):
    """``ULIDType`` whose results are python-ulid ``ULID`` objects.

    Same storage on every database as :class:`~sqlalchemy_ulid.ULIDType`
    (the same DDL, so migrations need no change), the same binds, and
    comparisons and pagination work the same. Values assigned to a mapped
    attribute are converted to python-ulid objects at once, so the session
    holds one object per row; use :func:`new_python_ulid` as the default
    (our :func:`~sqlalchemy_ulid.new_ulid` returns our ``ULID``, which would
    give a new row two identities until it is reloaded).

    Args:
        storage: as for :class:`~sqlalchemy_ulid.ULIDType`.
    """

    cache_ok = True

    def __init__(self, storage: Storage = "auto") -> None:
        super().__init__(storage)

    def __repr__(self) -> str:
        return super().__repr__().replace("ULIDType(", "PythonULIDType(", 1)

    @property
    def python_type(self) -> type[Any]:
        """python-ulid's ``ULID``."""
        return PyULID

    @staticmethod
    def _orm_set_listener(target: object, value: Any, oldvalue: object, initiator: object) -> Any:
        # The core's ORM glue uses this in place of its own converter for
        # attributes mapped to this type: assigned values become python-ulid
        # objects at once (bad ones raise), so the session has one identity.
        return None if value is None else to_python_ulid(value)

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        """Wrap ``ULIDType``'s processor: its ULID's 16 bytes become python-ulid's."""
        ours = super().result_processor(dialect, coltype)
        assert ours is not None  # ULIDType always converts
        make = PyULID

        def to_theirs(value: Any) -> Any:
            # The drivers' usual values skip our ULID: 16 bytes (binary
            # storage) go straight in, a uuid.UUID gives its bytes.
            kind = type(value)
            if kind is bytes and len(value) == 16:
                return make(value)
            if kind is UUID:
                return make(value.bytes)
            if value is None:
                return None
            return make(ours(value).bytes)

        return to_theirs


def render_item(type_: str, obj: Any, autogen_context: Any) -> str | Literal[False]:
    """Alembic ``render_item``: :func:`sqlalchemy_ulid.alembic.render_item` plus this type.

    Renders ``sqlalchemy_ulid.contrib.python_ulid.PythonULIDType(...)`` and
    adds its import to the migration; everything else goes to the core's
    ``render_item``. Use it in ``env.py`` in place of the core one.
    """
    if type_ == "type" and type(obj) is PythonULIDType:
        imports = getattr(autogen_context, "imports", None)
        if imports is not None:
            imports.add("import sqlalchemy_ulid.contrib.python_ulid")
        return f"sqlalchemy_ulid.contrib.python_ulid.{obj!r}"
    from ..alembic import render_item as core_render_item

    return core_render_item(type_, obj, autogen_context)
