"""The database servers every benchmark measures: URLs from the suite's variables.

``SQLALCHEMY_ULID_POSTGRESQL_URL`` / ``SQLALCHEMY_ULID_MYSQL_URL``, else the
local test servers. Importing it also puts the suite's ``tests/`` on
``sys.path``: the benchmarks share its helpers (``_writers``: the writer
threads of the benchmarks of ops on live tables).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

POSTGRESQL_URL = os.environ.get(
    "SQLALCHEMY_ULID_POSTGRESQL_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
MARIADB_URL = os.environ.get(
    "SQLALCHEMY_ULID_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
)
URLS = {"PostgreSQL": POSTGRESQL_URL, "MariaDB": MARIADB_URL}
