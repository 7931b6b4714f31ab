"""Adapters for third-party libraries, one module each, each behind its own extra.

Nothing here is imported by ``import sqlalchemy_ulid``: import the module of
the integration you use, e.g. ``sqlalchemy_ulid.contrib.sqlakeyset``.
Without its package, a module raises :class:`ImportError` naming the extra
to install.
"""

from __future__ import annotations


def _missing(module: str, extra: str, error: ModuleNotFoundError) -> ImportError:
    """The error a contrib module raises when its third-party package is absent."""
    return ImportError(
        f"sqlalchemy_ulid.contrib.{module} needs the {extra} extra ({error}): "
        f"pip install 'sqlalchemy-ulid[{extra}]'"
    )
