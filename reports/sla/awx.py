"""Schedule rules (RFC 5545 rrule strings) checked the way AWX checks them, before anything talks to AWX.

AWX (awx/api/serializers.py, SchedulePreviewSerializer.validate_rrule, AWX 21+) accepts one DTSTART with a time
zone (`DTSTART;TZID=Europe/Berlin:20260101T060000` or `DTSTART:20260101T060000Z`; a naive DTSTART is refused), no
EXDATE / RDATE, and for every RRULE / EXRULE: INTERVAL present, no SECONDLY, no BYDAY with a numeric prefix, not
both COUNT and UNTIL, COUNT at most 999; then the whole string must parse with dateutil (rrulestr, forceset) with
the TZID resolved by zoneinfo ("A valid TZID must be provided"). `validate` applies the same rules and returns the
messages AWX would give; `occurrences` lists the next run times, so a test (or a person) can see what a rule does.
"""

from __future__ import annotations

import re
import warnings
from datetime import datetime, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil import rrule as du_rrule

_BYDAY_NUMERIC = re.compile(r".*?BYDAY[:=][0-9]+[a-zA-Z]{2}")
_DTSTART = re.compile(r".*?(DTSTART(;[^:]+)?:[0-9]+T[0-9]+Z?)")
_DTSTART_NAIVE = re.compile(r".*?(DTSTART:[0-9]+T[0-9]+) ")
_RULE = re.compile(r".*?(RULE:[^\s]*)")
_TZID = re.compile(r"DTSTART;TZID=(?P<tzid>[^:]+):")
_COUNT = re.compile(r".*?(COUNT=[0-9]+)")


def _parse(value: str):
    tzinfos = {"UTC": timezone.utc, "Z": timezone.utc}
    m = _TZID.search(value)
    if m:
        try:
            tzinfos[m.group("tzid")] = ZoneInfo(m.group("tzid"))
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("A valid TZID must be provided (e.g., America/New_York)") from None
    with warnings.catch_warnings():  # dateutil warns (deprecation) on COUNT with UNTIL, which validate() reports
        warnings.simplefilter("ignore", DeprecationWarning)
        parsed = du_rrule.rrulestr(value, forceset=True, tzinfos=tzinfos)
    for rule in parsed._rrule:  # noqa: SLF001 - dateutil keeps the rules here; AWX checks them the same way
        if rule._dtstart is not None and rule._dtstart.tzinfo is None:  # noqa: SLF001
            raise ValueError("A valid TZID must be provided (e.g., America/New_York)")
    return parsed


def validate(value: str) -> list[str]:
    """The errors AWX would report for this rrule string (empty when AWX accepts it)."""
    value = value or ""
    errors = []
    if not value.strip():
        return ["This field may not be blank."]
    dtstarts = _DTSTART.findall(value)
    if not dtstarts:
        errors.append("Valid DTSTART required in rrule. Value should start with: DTSTART:YYYYMMDDTHHMMSSZ")
    if _DTSTART_NAIVE.findall(value):
        errors.append("DTSTART cannot be a naive datetime.  Specify ;TZINFO= or YYYYMMDDTHHMMSSZZ.")
    if len(dtstarts) > 1:
        errors.append("Multiple DTSTART is not supported.")
    if "exdate:" in value.lower():
        errors.append("EXDATE not allowed in rrule.")
    if "rdate:" in value.lower():
        errors.append("RDATE not allowed in rrule.")
    rules = _RULE.findall(value)
    if not rules:
        errors.append("One or more rule required in rrule.")
    for rule in rules:
        if "interval" not in rule.lower():
            errors.append("INTERVAL required in rrule: %s" % rule)
        elif "secondly" in rule.lower():
            errors.append("SECONDLY is not supported: %s" % rule)
        if _BYDAY_NUMERIC.match(rule):
            errors.append("BYDAY with numeric prefix not supported: %s" % rule)
        if "COUNT" in rule and "UNTIL" in rule:
            errors.append("RRULE may not contain both COUNT and UNTIL: %s" % rule)
        m = _COUNT.match(rule)
        if m and int(m.group(1).split("=")[1]) > 999:
            errors.append("COUNT > 999 is unsupported: %s" % rule)
    try:
        _parse(value)
    except Exception as exc:  # noqa: BLE001 - dateutil raises many types; AWX reports them all the same way
        errors.append("rrule parsing failed validation: %s" % exc)
    return errors


def occurrences(value: str, count: int = 3, after: datetime | None = None) -> list[datetime]:
    """The next `count` run times after `after` (default now), as aware datetimes."""
    parsed = _parse(value)
    after = after or datetime.now(timezone.utc)
    out, cur = [], after
    for _ in range(count):
        nxt = parsed.after(cur)
        if nxt is None:
            break
        out.append(nxt)
        cur = nxt
    return out
