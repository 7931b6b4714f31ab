"""``python -m sqlalchemy_ulid``: see :mod:`sqlalchemy_ulid._cli`."""

from ._cli import run

if __name__ == "__main__":
    run()
