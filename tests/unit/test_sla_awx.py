"""playbooks/awx_setup.yml without any AWX server: syntax, and its schedules checked the way AWX checks them."""

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from reports.sla.awx import occurrences, validate

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAY = yaml.safe_load((ROOT / "playbooks" / "awx_setup.yml").read_text())[0]
SCHEDULES = PLAY["vars"]["awx_setup_schedules"]
AFTER = datetime(2026, 11, 30, 5, 0, tzinfo=timezone.utc)


def site_collections():
    import importlib.util

    spec = importlib.util.find_spec("ansible_collections.awx.awx")
    return Path(spec.submodule_search_locations[0]).parents[1] if spec else None


@pytest.mark.parametrize("key", sorted(SCHEDULES))
def test_the_playbook_schedules_are_rules_awx_accepts(key):
    rule = SCHEDULES[key]["rrule"]
    assert validate(rule) == []
    assert rule.startswith("DTSTART;TZID=") and "INTERVAL=" in rule


def test_what_the_schedules_do():
    # (dateutil walks a rule from its DTSTART: the minutely rule is checked near it, which is fast)
    probe = occurrences(SCHEDULES["healthprobe"]["rrule"], 3, datetime(2026, 1, 1, 0, 2, tzinfo=timezone.utc))
    assert [d.isoformat() for d in probe] == ["2026-01-01T00:05:00+00:00", "2026-01-01T00:10:00+00:00",
                                              "2026-01-01T00:15:00+00:00"]
    review = occurrences(SCHEDULES["sla_review"]["rrule"], 3, AFTER)
    assert [d.isoformat() for d in review] == ["2026-12-01T06:00:00+00:00", "2027-01-01T06:00:00+00:00",
                                               "2027-02-01T06:00:00+00:00"]
    weekly = occurrences(SCHEDULES["assessment"]["rrule"], 2, AFTER)
    assert [d.isoformat() for d in weekly] == ["2026-12-07T02:00:00+00:00", "2026-12-14T02:00:00+00:00"]
    # a time zone at the edge: 06:00 in Berlin is 05:00 UTC in winter and 04:00 UTC in summer
    berlin = "DTSTART;TZID=Europe/Berlin:20260101T060000 RRULE:FREQ=MONTHLY;INTERVAL=1;BYMONTHDAY=1"
    assert validate(berlin) == []
    utc = [d.astimezone(timezone.utc).hour for d in occurrences(berlin, 12, AFTER)]
    assert utc[0] == 5 and 4 in utc


@pytest.mark.parametrize("rule, message", [
    ("", "may not be blank"),
    ("DTSTART:NONSENSE", "Valid DTSTART required"),
    ("DTSTART:20300308T050000 RRULE:FREQ=DAILY;INTERVAL=1", "naive datetime"),
    ("DTSTART:20300308T050000Z DTSTART:20310308T050000Z RRULE:FREQ=DAILY;INTERVAL=1", "Multiple DTSTART"),
    ("DTSTART:20300308T050000Z", "One or more rule required"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=MONTHLY;BYMONTHDAY=1", "INTERVAL required"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=SECONDLY;INTERVAL=5;COUNT=6", "SECONDLY is not supported"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=YEARLY;INTERVAL=1;BYDAY=5MO", "BYDAY with numeric prefix"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=DAILY;INTERVAL=10;COUNT=500;UNTIL=20310925T104941Z", "both COUNT and UNTIL"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=DAILY;INTERVAL=1;COUNT=2000", "COUNT > 999"),
    ("DTSTART;TZID=US-Eastern:19961105T090000 RRULE:FREQ=MINUTELY;INTERVAL=10;COUNT=5", "valid TZID"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=MONTHLY;INTERVAL=1 EXDATE:20300401T050000Z", "EXDATE not allowed"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=REGULARLY;INTERVAL=1", "rrule parsing failed"),
])
def test_rules_awx_refuses(rule, message):
    errors = validate(rule)
    assert any(message in e for e in errors), errors


def test_which_templates_may_be_sliced():
    templates = {t["name"]: t for t in PLAY["vars"]["awx_setup_job_templates"]}
    assert templates["ClusterMAX | weekly quick assessment"]["job_slice_count"] == 1
    assert templates["ClusterMAX | monthly SLA review"]["job_slice_count"] == 1
    assert set(PLAY["vars"]["awx_setup_per_host_tags"]).isdisjoint({"network", "storage", "burnin", "reboot",
                                                                     "fault_injection"})
    assert templates["ClusterMAX | health probe"]["allow_simultaneous"] is True
    survey = templates["ClusterMAX | monthly SLA review"]["survey"]["spec"]
    assert [q["variable"] for q in survey] == ["sla_month"]


def test_the_rrule_check_command():
    ok = subprocess.run([sys.executable, "-m", "reports.sla", "rrule-check", SCHEDULES["sla_review"]["rrule"]],
                        capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert ok.returncode == 0 and '"valid": true' in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "reports.sla", "rrule-check",
                          "DTSTART:20300308T050000Z RRULE:FREQ=DAILY"], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert bad.returncode == 1 and "INTERVAL required" in bad.stdout


@pytest.mark.skipif(site_collections() is None, reason="awx.awx is not installed (pip install 'ansible>=12,<13')")
def test_awx_setup_passes_a_syntax_check():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PATH="%s:%s" % (BIN, env.get("PATH", "")), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH="%s:%s" % (ROOT / ".collections", site_collections()))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "playbooks/awx_setup.yml"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "playbook: playbooks/awx_setup.yml" in proc.stdout


SLICED = "ClusterMAX | per-host assessment (sliceable)"
# Stage 1, as awx_setup.yml renders the template's extra_vars into what it sends AWX; stage 2, as ansible renders
# them in each job AWX starts with its own awx_* variables. Real ansible-playbook runs on localhost.
SENT = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.copy:
        dest: "{{ out }}"
        content: >-
          {{ (awx_setup_job_templates | selectattr('name', 'equalto', template) | first).extra_vars | to_json }}
"""
SEEN = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'run_id': assess_run_id, 'slice': assess_run_slice} | to_json }}"
"""


def _play(tmp_path, text, *extra):
    path = tmp_path / ("play%d.yml" % len(list(tmp_path.glob("play*.yml"))))
    path.write_text(text)
    proc = subprocess.run([str(BIN / "ansible-playbook"), str(path), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_the_sliced_template_names_one_run_and_each_job_its_slice(tmp_path):
    setup_vars = tmp_path / "setup_vars.yml"
    setup_vars.write_text(yaml.safe_dump(PLAY["vars"]))
    sent = tmp_path / "sent"
    _play(tmp_path, SENT, "-e", "@%s" % setup_vars, "-e", json.dumps({"template": SLICED, "out": str(sent)}))
    seen = {}
    for case, awx in (("slice 2 of a launch", {"awx_job_id": 42, "awx_workflow_job_id": 40}),
                      ("unsliced", {"awx_job_id": 43})):
        out = tmp_path / ("seen-%d" % len(seen))
        _play(tmp_path, SEEN, "-e", "@%s" % sent, "-e", json.dumps(dict(awx, out=str(out))))
        seen[case] = json.loads(out.read_text())
    assert seen == {"slice 2 of a launch": {"run_id": "awx-40", "slice": "job-42"},
                    "unsliced": {"run_id": "awx-43", "slice": ""}}
