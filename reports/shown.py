"""A number as shown beside a verdict: never on the other side of a threshold than the exact number it stands for.

A value rounded for display can land on, or past, the line it was judged against: 74.995 is "75.0" beside a category
floor of 75 it missed, a detection of 120.04 s is "120.0 s" beside a 120 s limit it exceeded. `shown` keeps the
decimals asked for and adds more, only where fewer would put the shown value on the other side of (or on) a
threshold than the exact one. `at_least` is the comparison the judgement itself makes, with room for the float noise
of a weighted mean (60 computed as 59.99999999999997 is 60), never for a rounded value.
"""

# A weighted mean of exact fractions is off by a few ulps; a judged number is never that close to a line on purpose.
FLOAT_NOISE = 1e-9


def at_least(value, floor):
    """value >= floor, counting float noise as equal."""
    return value >= floor - FLOAT_NOISE * max(1.0, abs(floor))


def _side(value, line):
    if abs(value - line) <= FLOAT_NOISE * max(1.0, abs(line)):
        return 0
    return 1 if value > line else -1


def same_side(shown_value, value, thresholds):
    """Whether a number as shown (read back: float(text)) sits on the same side of every threshold as the exact one:
    for a text made otherwise than by shown() (a grader's own format), kept where it does not cross a line."""
    return all(_side(shown_value, line) == _side(value, line) for line in thresholds if line is not None)


def shown(value, thresholds=(), decimals=1, scale=1.0, max_decimals=6, significant=None):
    """value * scale with `decimals` decimals, or as many more as it takes for the shown number to sit on the same side
    of every threshold (also scaled) as the exact one ("%.1f": 90.0 for 89.99905 beside a floor of 90 becomes
    "89.999").

    significant: that many significant digits ("%g", as the report's tables show a number under 100) instead of
    decimals, and up to max_decimals more by the same rule ("%.3g": 100 for 99.96 beside a floor of 100 becomes
    "99.96")."""
    lines = [t * scale for t in thresholds if t is not None]
    exact = value * scale
    if significant is None:
        texts = ("%.*f" % (digits, exact) for digits in range(decimals, max_decimals + 1))
    else:
        texts = ("%.*g" % (digits, exact) for digits in range(significant, significant + max_decimals + 1))
    for text in texts:
        if same_side(float(text), exact, lines):
            return text
    return text
