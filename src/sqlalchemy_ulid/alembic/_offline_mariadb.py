"""The MariaDB script toolkit of the offline (``--sql``) scripts not yet on the engine.

``_SAVED``, ``_MAX_MS`` and ``_INTEGERS``, used by the key conversion's
script (its blocks, SIGNALs, literals and comments come from the engine's
``_plan/render_mariadb.py``). ``add_ulid_column(online=True)`` and
``alter_ulid_storage(online=True)`` write their scripts through the engine
(``_plan/render_mariadb.py``, ``mysql/add_column.py``, ``mysql/storage.py``).
"""

from __future__ import annotations

__all__: list[str] = []

#: The largest Unix millisecond a ULID holds (48 bits).
_MAX_MS = 2**48 - 1
#: Placeholders in a batch template for what is found when the script runs.
_KEY, _MILLIS = "\0key\0", "\0millis\0"
_INTEGERS = "'tinyint', 'smallint', 'mediumint', 'int', 'bigint'"


#: What the script's session changes, saved in user variables and restored.
_SAVED = (
    ("sql_mode", "@sqlalchemy_ulid_sql_mode"),
    ("time_zone", "@sqlalchemy_ulid_time_zone"),
    ("lock_wait_timeout", "@sqlalchemy_ulid_lock_wait"),
    ("innodb_lock_wait_timeout", "@sqlalchemy_ulid_row_wait"),
    # 0 while the script runs: a user's or the server's limit would cancel
    # a copy or a fill (one statement) on a big table.
    ("max_statement_time", "@sqlalchemy_ulid_statement_time"),
)
