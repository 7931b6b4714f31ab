"""Adapters for third-party libraries, one module each, each behind its own extra.

Nothing here is imported by ``import sqlalchemy_ulid``: import the module of
the integration you use, e.g. ``sqlalchemy_ulid.contrib.sqlakeyset``.
"""
