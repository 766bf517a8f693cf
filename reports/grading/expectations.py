"""Expected values: GPU models from reports/data/gpus.yml, and comparisons with their wording."""

import operator
import os

from reports import DATA_DIR, yamlio
from reports.shown import shown

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}


def load_gpus(path=None):
    with open(path or os.path.join(DATA_DIR, "gpus.yml"), encoding="utf-8") as fh:
        return yamlio.safe_load(fh)["models"]


def gpu_model_key(name, models):
    """The gpus.yml key for a reported GPU name; the most specific match wins (GB200 over B200)."""
    if not name:
        return None
    lowered = name.lower()
    best, best_len = None, 0
    for key, spec in models.items():
        needles = [m.lower() for m in spec.get("match", [])]
        if needles and all(n in lowered for n in needles):
            length = sum(len(n) for n in needles)
            if length > best_len:
                best, best_len = key, length
    return best


def resolve(expect, model_spec, observed=None):
    """Threshold of an expectation: a fixed `value`, or `fraction` × the GPU model's field `of`.
    Returns (threshold or None, text, reason when it cannot be resolved).

    observed: the value the threshold will be shown beside (exact, unrounded). The threshold's text then has as many
    significant digits as it takes to read on its own side of that value ("%.4g" of 0.7 × 5762 = 4033.4 is "4033",
    which reads as met by an observed 4033.3 that failed: it is "4033.4" then); where nothing crosses, the text is
    the usual one."""
    op = expect.get("op", ">=")
    if op not in OPS:
        raise ValueError("unknown comparison %r" % op)
    if "value" in expect:
        return float(expect["value"]), "%s %s" % (op, _fmt(expect["value"], observed)), None
    field = expect["of"]
    if model_spec is None:
        return None, None, "no expectation for this GPU model in gpus.yml"
    if field not in model_spec:
        return None, None, missing(model_spec, field)
    fraction = float(expect.get("fraction", 1.0))
    threshold = fraction * float(model_spec[field])
    return threshold, "%s %s (%g × %s %s)" % (op, _fmt(threshold, observed), fraction, field,
                                               _fmt(model_spec[field])), None


def missing(model_spec, field):
    """Why a GPU model has no `field`: the reason gpus.yml gives under the model's `absent` (a figure no public
    source has, e.g. GB300's MAMF), else that gpus.yml lacks it."""
    return (model_spec.get("absent") or {}).get(field) or "gpus.yml has no %s for this GPU model" % field


def meets(value, expect, threshold):
    return OPS[expect.get("op", ">=")](value, threshold)


def judge(value, expect, warn=None):
    """(status, expected text) of a value against a fixed expectation and, when it meets it, the warn one:
    fail below expect, warn below warn, else pass (graders whose thresholds do not depend on the GPU model)."""
    threshold, text, _ = resolve(expect, None, value)
    if not meets(value, expect, threshold):
        return "fail", text
    if warn:
        w_threshold, w_text, _ = resolve(warn, None, value)
        if not meets(value, warn, w_threshold):
            return "warn", "%s (warn unless %s)" % (text, w_text)
    return "pass", text


def _fmt(value, observed=None):
    """A threshold as shown: whole numbers as they are, others with 4 significant digits, or more where an observed
    value shown beside it would otherwise read as on the other side of it (or on it)."""
    value = float(value)
    if value.is_integer():
        return str(int(value))
    if observed is None:
        return "%.4g" % value
    return shown(value, (float(observed),), significant=4)
