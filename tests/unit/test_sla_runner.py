"""reports/sla/runner.py: the progress display on ansible-runner events, and the -e parsing of clustermax-run."""

import io

import pytest

from reports.sla.runner import Progress, parse_extravars


def events():
    yield {"event": "playbook_on_play_start", "event_data": {"play": "Health probe | sample every node"}}
    yield {"event": "playbook_on_task_start", "event_data": {"task": "SLA probe | sample the node"}}
    for host in ("n1", "n3"):
        yield {"event": "runner_on_ok", "event_data": {"host": host, "res": {"changed": False}}}
    yield {"event": "runner_on_unreachable", "event_data": {"host": "n2", "res": {"unreachable": True}}}
    yield {"event": "verbose", "stdout": "noise"}
    yield {"event": "playbook_on_task_start", "event_data": {"task": "SLA probe | append the round"}}
    yield {"event": "runner_on_ok", "event_data": {"host": "n1", "res": {"changed": True}}}
    yield {"event": "playbook_on_stats", "event_data": {}}


def test_progress_lines_per_task():
    out = io.StringIO()
    progress = Progress(stream=out, live=False)
    assert all(progress(e) is True for e in events())
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines == progress.lines
    assert lines[0].endswith("PLAY Health probe | sample every node")
    assert lines[1].endswith("SLA probe | sample the node: ok 2, unreachable 1")
    assert lines[2].endswith("SLA probe | append the round: changed 1")
    assert progress.hosts == {"n1": "changed", "n2": "unreachable", "n3": "ok"}


def test_live_progress_redraws_one_line():
    out = io.StringIO()
    progress = Progress(stream=out, live=True, label="[1/2] ")
    for e in events():
        progress(e)
    text = out.getvalue()
    assert text.count("\r\033[K") >= 5  # redrawn as each result arrives
    assert "[1/2] [" in text and text.endswith("changed 1\n")


def test_extra_vars_like_ansible_playbook(tmp_path):
    f = tmp_path / "vars.yml"
    f.write_text("sla_tier: gold\nsla_system_overrides: {rack_down_nodes: 4}\n")
    assert parse_extravars(["sla_month=2026-11 assess_provider=acme", "@%s" % f, '{"sla_probe_interval_s": 2}']) == {
        "sla_month": "2026-11", "assess_provider": "acme", "sla_tier": "gold",
        "sla_system_overrides": {"rack_down_nodes": 4}, "sla_probe_interval_s": 2}
    with pytest.raises(ValueError):
        parse_extravars(["not-a-pair"])
