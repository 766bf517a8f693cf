"""junit.xml: well-formed, the common JUnit shape (testsuites > testsuite > testcase), one testcase per check row,
statuses mapped (fail -> failure, error -> error, skip -> skipped, warn -> passing with system-out), counts right."""

import xml.etree.ElementTree as ET
from pathlib import Path

from rating_runs import ANALYST_GOOD, RUBRIC, make_run

from reports.build import build, read_checks_csv
from reports.junit import junit_xml

SUITE_ATTRS = {"name", "tests", "failures", "errors", "skipped", "time"}
RESULT_TAGS = {"failure", "error", "skipped"}


def validate_junit(data):
    """The structure JUnit consumers (Jenkins, GitLab, GitHub reporters) rely on; returns problems."""
    problems = []
    root = ET.fromstring(data)
    if root.tag != "testsuites":
        return ["root is %s, not testsuites" % root.tag]
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in root:
        if suite.tag != "testsuite":
            problems.append("unexpected <%s> under testsuites" % suite.tag)
            continue
        missing = SUITE_ATTRS - set(suite.attrib)
        if missing:
            problems.append("testsuite %s lacks %s" % (suite.get("name"), sorted(missing)))
        cases = suite.findall("testcase")
        counted = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
        for child in suite:
            if child.tag not in ("testcase", "properties", "system-out", "system-err"):
                problems.append("unexpected <%s> in testsuite" % child.tag)
        for case in cases:
            if not case.get("name") or not case.get("classname") or case.get("time") is None:
                problems.append("testcase without name/classname/time")
            results = [c for c in case if c.tag in RESULT_TAGS]
            if len(results) > 1:
                problems.append("testcase %s has %d results" % (case.get("name"), len(results)))
            for c in results:
                if c.get("message") is None:
                    problems.append("<%s> without message" % c.tag)
                counted[{"failure": "failures", "error": "errors", "skipped": "skipped"}[c.tag]] += 1
        for key, n in counted.items():
            if int(suite.get(key, -1)) != n:
                problems.append("testsuite %s: %s=%s but %d counted" % (suite.get("name"), key, suite.get(key), n))
            totals[key] += n
    for key, n in totals.items():
        if int(root.get(key, -1)) != n:
            problems.append("testsuites: %s=%s but %d counted" % (key, root.get(key), n))
    return problems


def row(check_id, status, host="n1", **extra):
    base = {"check_id": check_id, "category": check_id.split(".")[0], "title": check_id, "host": host, "subject": "",
            "status": status, "observed": "", "expected": "", "reason": "", "severity": "major", "remediation": "",
            "weight": 1.0, "evidence": "measured"}
    base.update(extra)
    return base


def test_status_mapping_and_counts():
    rows = [row("a.p", "pass"), row("a.f", "fail", observed="400 GB/s", expected=">= 460", remediation="reseat"),
            row("a.e", "error", reason="probe crashed"), row("b.s", "skip", reason="no GPU"),
            row("b.w", "warn", observed="5 %"), row("pricing.x", "pass", host="", evidence="analyst")]
    data = junit_xml(rows, meta={"provider": "acme", "run_id": "r1"})
    assert data.startswith(b"<?xml") and validate_junit(data) == []
    root = ET.fromstring(data)
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("6", "1", "1", "1")
    cases = {c.get("classname"): c for c in root.iter("testcase")}
    failure = cases["a.a.f"].find("failure")
    assert failure.get("message") == "observed 400 GB/s; expected >= 460" and "remediation: reseat" in failure.text
    assert cases["a.a.e"].find("error").get("message") == "probe crashed"
    assert cases["b.b.s"].find("skipped").get("message") == "no GPU"
    assert cases["b.b.w"].find("system-out").text.startswith("WARN observed 5 %")
    assert list(cases["a.a.p"]) == []
    analyst = cases["pricing.pricing.x"]
    assert analyst.get("name") == "analyst" and "ANALYST INPUT" in analyst.find("system-out").text
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["provider"] == "acme" and props["run_id"] == "r1"


def test_invalid_xml_characters_are_replaced_not_fatal():
    data = junit_xml([row("a.f", "fail", observed="\x1b[31mred\x1b[0m\x00", reason="tab\tok")])
    assert validate_junit(data) == []
    message = ET.fromstring(data).find(".//failure").get("message")
    assert "\x1b" not in message and "red" in message and "\ufffd" in message


def test_validator_catches_broken_documents():
    assert validate_junit(b"<testsuite name='x'/>") == ["root is testsuite, not testsuites"]
    bad = (b"<testsuites tests='1' failures='0' errors='0' skipped='0'><testsuite name='s' tests='1' failures='0' "
           b"errors='0' skipped='0' time='0'><testcase name='c' classname='k' time='0'><failure message='m'/>"
           b"<skipped message='n'/></testcase></testsuite></testsuites>")
    problems = validate_junit(bad)
    assert "testcase c has 2 results" in problems and any("failures=0 but 1 counted" in p for p in problems)


def test_junit_of_a_built_run_has_a_testcase_per_check_row(tmp_path):
    run_dir = make_run(tmp_path, "excellent", host_overrides={"gn1": {"busbw_gbps": 100}})
    _, _, report_dir = build(run_dir, rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False)
    data = (Path(report_dir) / "junit.xml").read_bytes()
    assert validate_junit(data) == []
    rows = read_checks_csv(str(Path(report_dir) / "checks.csv"))
    root = ET.fromstring(data)
    assert int(root.get("tests")) == len(rows) == len(list(root.iter("testcase")))
    assert int(root.get("failures")) == sum(r["status"] == "fail" for r in rows) >= 2  # busbw + its straggler
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    # one node's bandwidth is low: networking 75.0, exactly Platinum's per-category floor
    assert props["tier"] == "Platinum" and props["score"] == "97.6"
    names = {s.get("name") for s in root.iter("testsuite")}
    assert {"preflight", "security", "networking", "consistency", "pricing"} <= names


def _reference_junit(rows, ratings=None, meta=None, timestamp=None, hostname="controller"):
    """junit.xml as ElementTree builds and indents it (how reports/junit.py made it before it wrote the lines itself):
    the reference the line writer must match byte for byte."""
    from collections import OrderedDict

    from reports import junit

    by_category = OrderedDict()
    for r in rows:
        by_category.setdefault(r["category"], []).append(r)
    root = ET.Element("testsuites", name="clustermax.assess")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for index, (category, items) in enumerate(by_category.items()):
        counts = {k: sum(r["status"] == s for r in items) for k, s in
                  (("failures", "fail"), ("errors", "error"), ("skipped", "skip"))}
        suite = ET.SubElement(root, "testsuite", name=junit._clean(category), tests=str(len(items)),
                              failures=str(counts["failures"]), errors=str(counts["errors"]),
                              skipped=str(counts["skipped"]), time="0", id=str(index), timestamp=timestamp or "",
                              hostname=hostname)
        if index == 0 and (ratings or meta):
            props = ET.SubElement(suite, "properties")
            values = {}
            if meta:
                values.update(provider=meta.get("provider"), run_id=meta.get("run_id"), profile=meta.get("profile"))
            if ratings:
                values.update(tier=ratings["tier"]["name"], score=ratings.get("score"),
                              coverage=ratings.get("coverage"))
            for key, value in values.items():
                ET.SubElement(props, "property", name=key, value="" if value is None else junit._clean(value))
        for r in items:
            case = ET.SubElement(suite, "testcase", classname=junit._clean("%s.%s" % (category, r["check_id"])),
                                 name=junit._case_name(r), time="0")
            if r["status"] in ("fail", "error"):
                tag = "failure" if r["status"] == "fail" else "error"
                ET.SubElement(case, tag, message=junit._message(r), type=r["status"]).text = junit._details(r)
            elif r["status"] == "skip":
                ET.SubElement(case, "skipped", message=junit._clean(r.get("reason") or "skipped"))
            elif r["status"] == "warn":
                ET.SubElement(case, "system-out").text = "WARN %s\n%s" % (junit._message(r), junit._details(r))
            elif r.get("evidence") == "analyst":
                ET.SubElement(case, "system-out").text = junit._details(r)
        totals["tests"] += len(items)
        for key in ("failures", "errors", "skipped"):
            totals[key] += counts[key]
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", "0")
    ET.indent(root, space=" ")
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def test_the_lines_are_what_elementtree_would_write(tmp_path):
    odd = [row("a.quote", "fail", observed='5 "GB/s" <low> & odd', expected="> 9\n\tper\r node", reason="x\x1by"),
           row("a.skip", "skip", reason='no "fio" & no <ior>'), row("a.warn", "warn", observed="7", subject="gpu0"),
           row("b.pass", "pass"), row("b.err", "error", host=""), row("c.an", "pass", evidence="analyst"),
           row("c.an2", "fail", evidence="analyst", remediation="ask\nagain")]
    for args in ((odd,), (odd, None, {"provider": "a&b", "run_id": "r<1>"}, "2026-12-05T00:00:00Z"), ([],),
                 ([row("a.p", "pass")], {"tier": {"name": "Gold"}, "score": 91.5, "coverage": None})):
        assert junit_xml(*args) == _reference_junit(*args), args[1:]
    run_dir = make_run(tmp_path, "poor")
    _, _, report_dir = build(run_dir, rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False)
    rows = read_checks_csv(Path(report_dir) / "checks.csv")
    assert junit_xml(rows, {"tier": {"name": "Bronze"}, "score": 50}, {"provider": "p"}, "t") == _reference_junit(
        rows, {"tier": {"name": "Bronze"}, "score": 50}, {"provider": "p"}, "t")
