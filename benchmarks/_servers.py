"""The database servers every benchmark measures: URLs from the suite's variables.

``SQLALCHEMY_ULID_POSTGRESQL_URL`` / ``SQLALCHEMY_ULID_MYSQL_URL``, else the
local test servers.
"""

from __future__ import annotations

import os

POSTGRESQL_URL = os.environ.get(
    "SQLALCHEMY_ULID_POSTGRESQL_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
MARIADB_URL = os.environ.get(
    "SQLALCHEMY_ULID_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
)
URLS = {"PostgreSQL": POSTGRESQL_URL, "MariaDB": MARIADB_URL}
