"""junit.xml: one testcase per check row, so CI systems (GitLab, Jenkins, GitHub test reporters) show the checks.

Shape (the common Ant/Jenkins JUnit form):

    <testsuites name="clustermax.assess" tests failures errors skipped time>
      <testsuite name="<category>" tests failures errors skipped time timestamp hostname>
        <properties>  tier, score, coverage, provider, run_id (first suite only carries the run's) </properties>
        <testcase classname="<category>.<check id>" name="<host>[ <subject>]" time="0">
          fail  -> <failure message type="fail">observed / expected / reason / remediation</failure>
          error -> <error message type="error">...</error>
          skip  -> <skipped message="reason"/>
          warn  -> passes, with <system-out>WARN ...</system-out>
          pass  -> nothing inside
        </testcase>
Analyst rows (evidence "analyst") are named "analyst" and say so in their messages.
"""

import re
import xml.etree.ElementTree as ET
from collections import OrderedDict

STATUS_COUNTS = ("failures", "errors", "skipped")
# Characters XML 1.0 cannot carry (tool output sometimes has ANSI escapes or NULs): replaced, never fatal.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text):
    return _INVALID_XML.sub("\ufffd", str(text))


def _details(r):
    parts = []
    if r.get("evidence") == "analyst":
        parts.append("ANALYST INPUT (not measured on the cluster)")
    for key in ("observed", "expected", "reason", "remediation"):
        if r.get(key):
            parts.append("%s: %s" % (key, r[key]))
    return _clean("\n".join(parts))


def _message(r):
    bits = []
    if r.get("observed"):
        bits.append("observed %s" % r["observed"])
    if r.get("expected"):
        bits.append("expected %s" % r["expected"])
    if r.get("reason"):
        bits.append(r["reason"])
    return _clean("; ".join(bits) or r["status"])


def _case_name(r):
    host = "analyst" if r.get("evidence") == "analyst" else (r["host"] or "cluster")
    return _clean(host + (" [%s]" % r["subject"] if r.get("subject") else ""))


def junit_xml(rows, ratings=None, meta=None, timestamp=None, hostname="controller"):
    """The junit.xml document as bytes (UTF-8, with XML declaration)."""
    by_category = OrderedDict()
    for r in rows:
        by_category.setdefault(r["category"], []).append(r)
    root = ET.Element("testsuites", name="clustermax.assess")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for index, (category, items) in enumerate(by_category.items()):
        counts = {"failures": sum(r["status"] == "fail" for r in items),
                  "errors": sum(r["status"] == "error" for r in items),
                  "skipped": sum(r["status"] == "skip" for r in items)}
        suite = ET.SubElement(root, "testsuite", name=_clean(category), tests=str(len(items)),
                              failures=str(counts["failures"]), errors=str(counts["errors"]),
                              skipped=str(counts["skipped"]), time="0", id=str(index),
                              timestamp=timestamp or "", hostname=hostname)
        if index == 0 and (ratings or meta):
            props = ET.SubElement(suite, "properties")
            values = {}
            if meta:
                values.update(provider=meta.get("provider"), run_id=meta.get("run_id"),
                              profile=meta.get("profile"))
            if ratings:
                values.update(tier=ratings["tier"]["name"], score=ratings.get("score"),
                              coverage=ratings.get("coverage"))
            for key, value in values.items():
                ET.SubElement(props, "property", name=key, value="" if value is None else _clean(value))
        for r in items:
            case = ET.SubElement(suite, "testcase", classname=_clean("%s.%s" % (category, r["check_id"])),
                                 name=_case_name(r), time="0")
            status = r["status"]
            if status == "fail":
                el = ET.SubElement(case, "failure", message=_message(r), type="fail")
                el.text = _details(r)
            elif status == "error":
                el = ET.SubElement(case, "error", message=_message(r), type="error")
                el.text = _details(r)
            elif status == "skip":
                ET.SubElement(case, "skipped", message=_clean(r.get("reason") or "skipped"))
            elif status == "warn":
                ET.SubElement(case, "system-out").text = "WARN %s\n%s" % (_message(r), _details(r))
            elif r.get("evidence") == "analyst":
                ET.SubElement(case, "system-out").text = _details(r)
        totals["tests"] += len(items)
        for key in STATUS_COUNTS:
            totals[key] += counts[key]
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", "0")
    ET.indent(root, space=" ")
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
