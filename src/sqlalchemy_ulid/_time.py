"""Exact conversion between aware datetimes and Unix milliseconds."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ._codec import InvalidULID
from ._errors import InvalidTime

__all__ = ["MAX_TIMESTAMP_MS", "check_ms", "datetime_from_ms", "to_ms"]

#: The largest timestamp 48 bits hold (about the year 10889).
MAX_TIMESTAMP_MS = (1 << 48) - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = timedelta(milliseconds=1)


def to_ms(when: datetime | int) -> int:
    """Return ``when`` as whole Unix milliseconds, flooring sub-millisecond parts.

    Integer arithmetic on :class:`~datetime.timedelta` is exact, where
    ``when.timestamp() * 1000`` goes through a float and is off by one
    millisecond for about 1% of values. Naive datetimes are refused: guessing
    the local time zone silently shifts every boundary.

    Raises:
        InvalidTime: ``when`` is a naive datetime, or a datetime before 1970
            (the message names it).
        InvalidULID: int ``when`` is outside 0 .. 2**48 - 1 ms (a ValueError too).
        TypeError: ``when`` is neither a datetime nor an int.
    """
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise InvalidTime(
                f"naive datetime {when.isoformat()} refused: pass a timezone-aware "
                "datetime, e.g. datetime.now(timezone.utc)"
            )
        ms = (when - _EPOCH) // _ONE_MS
        if ms < 0:
            # The argument is a moment, not an id: say what is wrong with it,
            # rather than raise InvalidULID about a timestamp the caller never wrote.
            raise InvalidTime(
                f"datetime {when.isoformat()} is before 1970: ULID and UUIDv7 times "
                "start at 1970-01-01T00:00:00Z (Unix milliseconds outside "
                "0 .. 2**48 - 1 are refused)"
            )
    elif isinstance(when, int) and not isinstance(when, bool):
        ms = when
    else:
        raise TypeError(
            f"expected an aware datetime or int milliseconds, not {type(when).__name__}"
        )
    check_ms(ms)
    return ms


def check_ms(ms: int) -> None:
    """Raise :class:`InvalidULID` unless 0 <= ms < 2**48."""
    if not 0 <= ms <= MAX_TIMESTAMP_MS:
        raise InvalidULID(f"timestamp {ms} ms is outside 0 .. 2**48 - 1 (1970 to 10889)")


def datetime_from_ms(ms: int) -> datetime:
    """Return the aware UTC datetime of Unix milliseconds ``ms``."""
    try:
        return _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        raise OverflowError(
            f"timestamp {ms} ms is after datetime.max (year 9999); use .timestamp_ms"
        ) from None
