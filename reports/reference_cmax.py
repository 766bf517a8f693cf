"""The reference ClusterMAX CLI (`cmax audit`, clustermax on PyPI) beside our audit, check by check.

Providers and buyers run `cmax audit` today, so they will hold our audit against it. Three pieces:

* read_report: the report cmax prints (`cmax audit --vm -y > cmax.txt`): one block per check,
  `STATUS  Title  [check.id]` then an indented `Observed: ...` line, closed by a count line
  (`4 failed, 9 warnings, 7 passed, 39 skipped`). Anything else inside the report is an error naming the line, and the
  counts must add up: a report read in part is never compared.
* reports/data/reference_cmax.yml: every cmax check id (of every target: vm, standalone, slurm, k8s print the same 59)
  mapped to our check ids; `differs` lists the (cmax status, our status) pairs we judge differently on purpose, each
  with its reason and, where the reason holds only on some hosts, `when:` (a condition of WHEN, checked on our rows
  of the host); `not_implemented` says why a check has no counterpart yet.
* compare: one line per cmax check for one host: agree, differs (documented), disagree, not implemented, or
  "cmax skipped" (cmax did not judge it, so there is nothing to agree with).

The reports are handed in as RUN/reference/cmax/<host>.txt (`assess-report compare-cmax` puts them there); the audit
section of the report shows the comparison of each.
"""

import os
import re

from reports import DATA_DIR, yamlio

MAPPING_PATH = os.path.join(DATA_DIR, "reference_cmax.yml")
REFERENCE_DIR = os.path.join("reference", "cmax")
# cmax's status words -> ours. Its report uses exactly these four (cmax/audit_report.py, 0.2.1).
STATUS = {"PASS": "pass", "WARNING": "warn", "FAIL": "fail", "SKIPPED": "skip"}
# The closing line's words -> our status.
COUNT_WORDS = {"failed": "fail", "warning": "warn", "warnings": "warn", "passed": "pass", "skipped": "skip"}
HEADER = "# ClusterMAX audit report"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CHECK = re.compile(r"^([A-Z]+)\s+(.+?)\s+\[([A-Za-z0-9_.\-]+)\]\s*$")
_COUNTS = re.compile(r"^(\d+ (?:failed|warnings?|passed|skipped))(?:, (\d+ (?:failed|warnings?|passed|skipped)))*$")
_SHOW = re.compile(r"^\s+([A-Za-z0-9_.\-]+): (.+)$")
# How far apart two statuses are: the worse of our mapped rows stands for them (fail first).
SEVERITY = {"fail": 0, "error": 1, "warn": 2, "pass": 3, "skip": 4}


# Conditions a `differs` entry can name with `when:`: the difference is documented only where it holds, read from our
# rows of the host (the skip reasons of the checks that apply to GPU hosts: reports/phases/audit/common.py CONDITIONS).
# A pair whose condition does not hold, or cannot be told from the rows, is a disagreement.
def _skipped_for(rows, *reasons):
    return any(r.get("status") == "skip" and str(r.get("reason") or "").startswith(reasons) for r in rows)


WHEN = {
    "no_gpu": lambda rows: _skipped_for(rows, "not applicable: no GPU on this host"),
    "no_nvidia_gpu": lambda rows: _skipped_for(rows, "not applicable: no GPU on this host",
                                               "not applicable: no NVIDIA GPU on this host"),
}


class ReportError(ValueError):
    """A cmax report that cannot be read whole; says which line."""


def read_report(text, source="cmax output"):
    """cmax's report text -> {"host": name or None, "checks": {id: {status, title, observed}}}.

    Raises ReportError naming the first line that is not part of cmax's report format, a status word cmax does not
    print, a check listed twice, or counts that do not add up."""
    lines = [_ANSI.sub("", line.rstrip("\n")) for line in (text or "").splitlines()]
    host = next((m.group(1) for m in (re.match(r"^\s+Host:\s*(\S+)", line) for line in lines) if m), None)
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == HEADER)
    except StopIteration:
        first = next((line for line in lines if line.strip()), "")
        raise ReportError("cmax: %s holds no report (no %r line); first line: %r" % (source, HEADER, first[:120])) \
            from None
    checks, counts, current = {}, None, None
    for n, line in enumerate(lines[start + 1:], start + 2):
        stripped = line.strip()
        if not stripped:
            continue
        m = _CHECK.match(line)
        if m:
            word, title, check_id = m.groups()
            if word not in STATUS:
                raise ReportError("cmax: %s line %d: unknown status %r: %r" % (source, n, word, stripped[:120]))
            if check_id in checks:
                raise ReportError("cmax: %s line %d: check %s listed twice" % (source, n, check_id))
            current = checks[check_id] = {"status": STATUS[word], "title": title, "observed": None}
            continue
        if _COUNTS.match(stripped):
            counts = {}
            for part in stripped.split(", "):
                number, word = part.split(" ", 1)
                counts[COUNT_WORDS[word]] = counts.get(COUNT_WORDS[word], 0) + int(number)
            current = None
            continue
        if line.startswith(" ") and current is not None:
            if stripped.startswith("Observed:"):
                current["observed"] = stripped[len("Observed:"):].strip()
            continue  # References, issue details (-vv, -vvv): part of the check above
        if counts is not None and stripped.startswith("run 'cmax audit"):
            continue  # the closing hint
        raise ReportError("cmax: %s line %d: not a line of cmax's report: %r" % (source, n, stripped[:120]))
    if not checks:
        raise ReportError("cmax: %s: the report lists no check" % source)
    if counts is None:
        raise ReportError("cmax: %s: no closing count line (the report was cut short)" % source)
    found = {}
    for c in checks.values():
        found[c["status"]] = found.get(c["status"], 0) + 1
    if {k: v for k, v in counts.items() if v} != found:
        raise ReportError("cmax: %s: the closing line counts %s, the report lists %s" % (source, counts, found))
    return {"host": host, "checks": checks}


def read_show(text):
    """`cmax audit -s` -> [check id] in cmax's order."""
    return [m.group(1) for m in (_SHOW.match(line) for line in (text or "").splitlines()) if m]


def load_mapping(path=MAPPING_PATH):
    with open(path, encoding="utf-8") as fh:
        doc = yamlio.safe_load(fh)
    return doc


def mapping_problems(mapping, our_ids):
    """What is wrong with the mapping: ids of ours that do not exist, entries with neither ours nor a reason."""
    problems = []
    for cmax_id, entry in (mapping.get("checks") or {}).items():
        ours = entry.get("ours") or []
        if not ours and not entry.get("not_implemented"):
            problems.append("%s: maps to none of our checks and gives no not_implemented reason" % cmax_id)
        for ours_id in ours:
            if ours_id not in our_ids:
                problems.append("%s: our check %s does not exist" % (cmax_id, ours_id))
        for d in entry.get("differs") or []:
            if d.get("cmax") not in STATUS.values() or d.get("ours") not in SEVERITY or not d.get("reason"):
                problems.append("%s: differs entry %r needs cmax, ours (statuses) and reason" % (cmax_id, d))
            elif d["cmax"] == "skip":
                problems.append("%s: differs entry with cmax skip is never used (what cmax skipped is not compared)"
                                % cmax_id)
            if d.get("when") is not None and d["when"] not in WHEN:
                problems.append("%s: differs entry when %r is not a condition of reports/reference_cmax.py (%s)"
                                % (cmax_id, d["when"], ", ".join(sorted(WHEN))))
    return problems


def _ours(rows, ids):
    """The worst of our rows for these check ids on one host, with what they observed."""
    mine = [r for r in rows if r["check_id"] in ids]
    if not mine:
        return None, ""
    worst = min(mine, key=lambda r: SEVERITY.get(r["status"], 9))
    text = "; ".join("%s %s%s" % (r["check_id"], r["status"], ": %s" % (r.get("observed") or r.get("reason"))
                                  if (r.get("observed") or r.get("reason")) else "") for r in mine)
    return worst["status"], text


def compare(report, rows, host, mapping=None):
    """One line per cmax check of the report, for our rows of `host`: {cmax_id, title, cmax, cmax_observed, ours,
    ours_text, verdict, why}. Verdicts: agree, differs, disagree, not implemented, cmax skipped, not mapped."""
    mapping = mapping or load_mapping()
    entries = mapping.get("checks") or {}
    rows = [r for r in rows if r["host"] == host]
    out = []
    for cmax_id, c in report["checks"].items():
        entry = entries.get(cmax_id)
        line = {"cmax_id": cmax_id, "title": c["title"], "cmax": c["status"], "cmax_observed": c["observed"] or "",
                "ours": None, "ours_text": "", "verdict": None, "why": ""}
        out.append(line)
        if entry is None:
            line.update(verdict="not mapped", why="reports/data/reference_cmax.yml has no entry for it")
            continue
        line["ours"], line["ours_text"] = _ours(rows, entry.get("ours") or [])
        if entry.get("not_implemented") and line["ours"] is None:
            line.update(verdict="not implemented", why=entry["not_implemented"])
        elif c["status"] == "skip":
            line.update(verdict="cmax skipped", why=c["observed"] or "")
        elif line["ours"] is None:
            line.update(verdict="disagree", why="no row of ours for %s on %s" % (", ".join(entry.get("ours") or []),
                                                                                host))
        elif line["ours"] == c["status"]:
            line["verdict"] = "agree"
        else:
            reason = next((d["reason"] for d in entry.get("differs") or []
                           if d["cmax"] == c["status"] and d["ours"] == line["ours"]
                           and (d.get("when") is None or (d["when"] in WHEN and WHEN[d["when"]](rows)))), None)
            line.update(verdict="differs" if reason else "disagree", why=reason or "")
        if entry.get("note") and line["verdict"] != "not implemented":
            line["why"] = "; ".join(x for x in (line["why"], "not the same test: %s" % entry["note"]) if x)
    return out


def counts(lines):
    out = {}
    for line in lines:
        out[line["verdict"]] = out.get(line["verdict"], 0) + 1
    return out


def handed_in(run_dir):
    """{host: path} of the cmax reports handed in with the run (RUN/reference/cmax/<host>.txt)."""
    folder = os.path.join(run_dir, REFERENCE_DIR)
    if not os.path.isdir(folder):
        return {}
    return {name[:-4]: os.path.join(folder, name) for name in sorted(os.listdir(folder)) if name.endswith(".txt")}


VERDICT_ORDER = ("disagree", "not mapped", "not implemented", "differs", "agree", "cmax skipped")


def sorted_lines(lines):
    return sorted(lines, key=lambda x: (VERDICT_ORDER.index(x["verdict"]), x["cmax_id"]))


def table_rows(lines):
    """[cmax check, cmax, ours, verdict, why / what ours saw] for the report and the CLI, disagreements first."""
    return [[x["cmax_id"], "%s%s" % (x["cmax"], ": %s" % x["cmax_observed"] if x["cmax_observed"] else ""),
             x["ours_text"] or "-", x["verdict"], x["why"]] for x in sorted_lines(lines)]


def summary(lines):
    c = counts(lines)
    return ", ".join("%d %s" % (c[v], v) for v in VERDICT_ORDER if c.get(v))


def text(lines, host):
    out = ["cmax audit beside ours on %s: %d checks: %s" % (host, len(lines), summary(lines))]
    for cmax_id, cmax, ours, verdict, why in table_rows(lines):
        out.append("  %-16s %-48s cmax %s" % (verdict, cmax_id, cmax[:100]))
        out.append("  %-16s %-48s ours %s" % ("", "", ours[:160]))
        if why:
            out.append("  %-16s %-48s why  %s" % ("", "", why[:200]))
    return "\n".join(out)
