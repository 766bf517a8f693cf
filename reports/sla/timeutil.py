"""Time inside the SLA package: integer microseconds since the epoch, UTC. Time zones only at the edges.

Every timestamp that comes in (a sample, a Slurm line, a provider's CSV) is turned into UTC microseconds by
`parse_time`, which refuses a wall-clock time without a zone unless the caller names the zone the source writes
in (Slurm prints the controller's local time without an offset, for example). Every timestamp that goes out is
written by `iso_utc` or `iso_local` with its offset. Integers keep the arithmetic exact: availability at a credit
boundary is compared with `fractions.Fraction`, never with floats.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

US = 1_000_000
UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


class TimeError(ValueError):
    """A timestamp, zone or month that cannot be read without guessing."""


def zone(name: str | None):
    """A tzinfo for an IANA zone name ('UTC', 'Europe/Berlin'); a clear error for an unknown one."""
    if name in (None, "", "UTC", "Z", "utc"):
        return UTC
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise TimeError("unknown time zone %r (use an IANA name such as UTC or America/Chicago)" % name) from exc


def to_us(dt: datetime) -> int:
    """Aware datetime -> UTC microseconds since the epoch (exact)."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise TimeError("naive datetime %s: a time zone is required" % dt.isoformat())
    delta = dt - _EPOCH
    return (delta.days * 86400 + delta.seconds) * US + delta.microseconds


def from_us(us: int, tz=UTC) -> datetime:
    return (_EPOCH + timedelta(microseconds=int(us))).astimezone(tz)


def parse_time(value, default_tz=None, fold: int = 0) -> int:
    """A timestamp -> UTC microseconds.

    Accepts ISO 8601 / RFC 3339 text with 'Z' or an offset, epoch seconds (int/float or their text), or an aware
    datetime. A wall-clock time without a zone is read in `default_tz` (a tzinfo or a zone name) when given, else
    refused: guessing the zone of a downtime record moves it by hours. `fold` picks the pass of a wall-clock time
    the zone shows twice (the hour repeated when summer time ends): 0 the first, 1 the second.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            if default_tz is None:
                raise TimeError("timestamp %s has no time zone; name the zone of this source" % value.isoformat())
            value = value.replace(tzinfo=zone(default_tz) if isinstance(default_tz, str) else default_tz)
        return to_us(value)
    if isinstance(value, bool) or value is None:
        raise TimeError("not a timestamp: %r" % (value,))
    if isinstance(value, (int, float)):
        return int(round(value * US))
    text = str(value).strip()
    if not text:
        raise TimeError("empty timestamp")
    if re.fullmatch(r"-?\d+(\.\d+)?", text):
        return int(round(float(text) * US))
    norm = text.replace(" ", "T", 1) if re.match(r"^\d{4}-\d{2}-\d{2} \d", text) else text
    if norm.endswith(("Z", "z")):
        norm = norm[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(norm)
    except ValueError as exc:
        raise TimeError("unreadable timestamp %r (want ISO 8601 such as 2026-11-03T10:00:00Z)" % text) from exc
    if dt.tzinfo is None:
        if default_tz is None:
            raise TimeError("timestamp %r has no time zone; add Z or an offset, or name the zone of this source"
                            % text)
        tz = zone(default_tz) if isinstance(default_tz, str) or default_tz is None else default_tz
        dt = dt.replace(tzinfo=tz, fold=fold)
    return to_us(dt)


def month_window(month: str, tz=UTC) -> tuple[int, int]:
    """[first instant of the month, first instant of the next month) in zone tz, as UTC microseconds."""
    m = _MONTH.match(str(month or ""))
    if not m:
        raise TimeError("month %r: want YYYY-MM" % (month,))
    tz = zone(tz) if isinstance(tz, str) or tz is None else tz
    year, mon = int(m.group(1)), int(m.group(2))
    start = datetime(year, mon, 1, tzinfo=tz)
    end = datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=tz)
    return to_us(start), to_us(end)


def query_start(month: str, tz, source_tz, margin_us: int = 86400 * US) -> str:
    """Where a query to a source that reads wall-clock times in `source_tz` (sacctmgr: the Slurm host's zone) must
    start to see the whole month of zone `tz`: the month's first instant as that source's local time, `margin_us`
    early (a day: events are clipped to the month on the controller, a zone set wrong by hours still loses none)."""
    source_tz = zone(source_tz) if isinstance(source_tz, str) or source_tz is None else source_tz
    return from_us(month_window(month, tz)[0] - margin_us, source_tz).strftime("%Y-%m-%dT%H:%M:%S")


def previous_month(now_us: int, tz=UTC) -> str:
    """The calendar month before the one that contains now_us in zone tz, as YYYY-MM."""
    tz = zone(tz) if isinstance(tz, str) or tz is None else tz
    d = from_us(now_us, tz)
    year, mon = (d.year - 1, 12) if d.month == 1 else (d.year, d.month - 1)
    return "%04d-%02d" % (year, mon)


def add_months(month: str, n: int) -> str:
    year, mon = int(month[:4]), int(month[5:7])
    index = year * 12 + (mon - 1) + n
    return "%04d-%02d" % (index // 12, index % 12 + 1)


def add_days(us: int, days: int, tz=UTC) -> int:
    """The instant `days` calendar days after `us` at the same wall-clock time in zone tz: a contract's days are
    the local calendar's, so across a DST change one of them is 23 or 25 hours long (30 x 86400 s is not 30 days).
    The local time is taken as `us` shows it (its fold kept); one the new date skips (the spring-forward hour) is
    read with the offset before the change, as `parse_time` reads it."""
    tz = zone(tz) if isinstance(tz, str) or tz is None else tz
    local = from_us(us, tz)
    wall = local.replace(tzinfo=None) + timedelta(days=int(days))
    return to_us(wall.replace(tzinfo=tz, fold=local.fold))


def iso_utc(us: int | None) -> str:
    """RFC 3339 UTC with microseconds only when there are any: 2026-11-03T10:00:00Z."""
    if us is None:
        return ""
    dt = from_us(us)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        text += ".%06d" % dt.microsecond
    return text + "Z"


def iso_local(us: int | None, tz) -> str:
    """The same instant in zone tz with its offset: 2026-11-03T04:00:00-06:00."""
    if us is None:
        return ""
    tz = zone(tz) if isinstance(tz, str) or tz is None else tz
    dt = from_us(us, tz)
    return dt.isoformat(timespec="microseconds" if dt.microsecond else "seconds")


def duration_text(us: int) -> str:
    """4 h 03 min 20 s style, for people; the number of seconds is always given next to it in tables."""
    total = int(round(us / US))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = []
    if days:
        parts.append("%d d" % days)
    if hours or days:
        parts.append("%d h" % hours)
    if minutes or hours or days:
        parts.append("%02d min" % minutes if parts else "%d min" % minutes)
    parts.append("%02d s" % seconds if parts else "%d s" % seconds)
    return " ".join(parts)


def now_us() -> int:
    return to_us(datetime.now(UTC))
