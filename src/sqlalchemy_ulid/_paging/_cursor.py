"""Cursors: what ``after=`` and ``before=`` accept."""

from __future__ import annotations

import uuid
from typing import Union

from .._ulid import ULID

__all__ = ["Cursor"]

#: A cursor: a ULID, a uuid.UUID, or the column's text form of either.
# (Union, not "|": these aliases are evaluated at run time on Python 3.10.)
Cursor = Union[ULID, uuid.UUID, str]  # noqa: UP007
