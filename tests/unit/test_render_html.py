"""report.html without a browser: the blocks it renders (the same blocks report.md is written from), embedded
plots, escaping, the rating and checks parts; report.md's rating table; the build's progress bar and summary (what
the callback prints)."""

import base64
import io
import re
from pathlib import Path

import pytest
from rating_runs import ANALYST_GOOD, RUBRIC, make_run

from reports.build import Progress, build
from reports.render import markdown
from reports.render.blocks import Bullets, Heading, Paragraph, Quote, Table, code, em, figure, link, strong
from reports.render.report_html import blocks_html

PNG_1PX = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
                           "AAAABJRU5ErkJggg==")
BLOCKS = [
    Heading(2, "Storage <tiers>"),
    Paragraph(["Some ", em("emphasis"), ", ", strong("bold"), " and ", code("a|b <code>"), "."]),
    Table(["tier", "read", "status"],
          [["/home", "9.5 GB/s", "pass"], ["a | b", 1, "FAIL"], [None, [strong("no"), ": x"], "<td>"]]),
    Bullets(["one", ["two ", link("link", "#x")]]), Bullets(["first", "second"], numbered=True),
    Quote("quoted & <raw>"),
]


def test_blocks_as_html_escaped():
    out = blocks_html(BLOCKS)
    assert '<h2 id="storage-tiers">Storage &lt;tiers&gt;</h2>' in out
    assert "<em>emphasis</em>" in out and "<strong>bold</strong>" in out and "<code>a|b &lt;code&gt;</code>" in out
    assert "<th>tier</th>" in out and '<td class="st st-pass">pass</td>' in out and '<td class="st st-fail">FAIL' in out
    assert "<td>a | b</td>" in out and '<td class="num">9.5 GB/s</td>' in out and '<td class="num">1</td>' in out
    assert "<td>–</td><td><strong>no</strong>: x</td><td>&lt;td&gt;</td>" in out
    assert '<ul><li>one</li><li>two <a href="#x">link</a></li></ul>' in out
    assert "<ol><li>first</li><li>second</li></ol>" in out
    assert "<blockquote>quoted &amp; &lt;raw&gt;</blockquote>" in out
    assert "<raw>" not in out and "<tiers>" not in out


def test_the_same_blocks_as_markdown():
    md = markdown.render(BLOCKS)
    assert md.startswith("## Storage <tiers>\n\nSome *emphasis*, **bold** and `a|b <code>`.\n\n"
                         "| tier | read | status |\n|---|---|---|\n| /home | 9.5 GB/s | pass |\n")
    assert ("| a \\| b | 1 | FAIL |\n| – | **no**: x | <td> |\n\n- one\n- two [link](#x)\n\n1. first\n2. second\n\n"
            in md)
    assert md.endswith("> quoted & <raw>\n") and markdown.render([]) == ""


def test_markdown_cells_of_every_kind_read_as_their_spans_would():
    """cell() takes plain strings and numbers without making spans (report.md's checks table: thousands of rows);
    each kind still reads as inline() of it, None and an empty string as the en dash."""
    row = ["", 0.5, True, 12, "a|b\nc", code("x|y"), [em("e"), " ", 3], None]
    assert markdown.table(["c%d" % i for i in range(len(row))], [row]).splitlines()[2] == (
        "| – | 0.5 | True | 12 | a\\|b c | `x\\|y` | *e* 3 | – |")
    for value in row[1:-1]:
        assert markdown.cell(value) == markdown.inline(value).replace("|", "\\|").replace("\n", " ")


def test_images_are_embedded_from_the_report_dir_only(tmp_path):
    (tmp_path / "plot.png").write_bytes(PNG_1PX)
    (tmp_path / "notes.txt").write_text("not an image")
    images = [b for name in ("plot.png", "missing.png", "../etc/x.png", "https://example.com/x.png", "notes.txt")
              for b in figure(name, "busbw" if name == "plot.png" else name)]
    out = blocks_html(images, str(tmp_path))
    assert '<img alt="busbw" src="data:image/png;base64,%s">' % base64.b64encode(PNG_1PX).decode() in out
    assert out.count("not embedded") == 4 and 'src="https://' not in out
    assert figure(None, "not drawn") == []
    assert markdown.render(figure("plot.png", "busbw")) == "![busbw](plot.png)\n"


def test_javascript_links_are_neutralised():
    out = blocks_html([Paragraph([link("x", "javascript:alert(1)"), link("log", "../artifacts/h1/n4.log")])])
    assert '<a href="#">x</a>' in out and '<a href="../artifacts/h1/n4.log">log</a>' in out


def test_built_report_html_and_md(tmp_path):
    run_dir = make_run(tmp_path, "excellent", host_overrides={"gn2": {"ssh_password_auth": 1}})
    text, code, report_dir = build(run_dir, rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False)
    page = (Path(report_dir) / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script src" not in page and "<link" not in page
    assert re.search(r'<div class="tier" id="tier"[^>]*>Participation Ribbon<small>', page)
    assert page.count('<tr class="row-fail">') == 2  # the row, and the check in the by-check table
    assert "Analyst input</strong> (not measured on the cluster)" in page
    assert page.count('<span class="tag-analyst">analyst</span>') >= 4  # every analyst row says so
    assert 'id="categories"' in page and 'id="gates"' in page and 'id="rationale"' in page
    assert "@media print" in page
    md = (Path(report_dir) / "report.md").read_text()
    head = md.split("## Node inventory")[0]
    assert "**Tier: Participation Ribbon, score 97.8, coverage 100% (capped by critical_security; scores alone: " \
           "Platinum)**" in head
    assert "| Security | measured | 3 | 84.4 | 100% | 7 | 0 | 1 | 0 | 0 |" in head  # (5 x 0.75 + 3) / 8
    assert "| Pricing | analyst input | 2 | 100.0 | 100% | 1 | 0 | 0 | 0 | 0 |" in head
    assert "| analyst.pricing.rate | (analyst) |" in md
    # the summary the callback prints at the end of ansible-playbook: the rating table
    assert "tier: Participation Ribbon" in text and "gate critical_security -> cap Participation Ribbon" in text
    assert re.search(r"security\s+mixed\s+84\.4\s+100%\s+7\s+0\s+1\s+0\s+0", text)
    assert re.search(r"pricing\s+analyst\s+100\.0\s+100%", text)


def test_progress_bar_draws_on_request_only():
    stream = io.StringIO()
    bar = Progress(enabled=True, stream=stream)
    bar(0.0, "loading")
    bar(1.0, "done")
    bar.close()
    assert "[------------------------------]   0% loading" in stream.getvalue()
    assert "[##############################] 100% done" in stream.getvalue() and stream.getvalue().endswith("\n")
    quiet = io.StringIO()
    bar = Progress(stream=quiet)  # not a terminal: nothing
    bar(0.5, "x")
    bar.close()
    assert quiet.getvalue() == ""


def test_cli_build_progress_goes_to_stderr(tmp_path, capsys):
    from reports.cli import main

    run_dir = make_run(tmp_path, "excellent")
    assert main(["build", str(run_dir), "--rubric", RUBRIC, "--analyst", ANALYST_GOOD, "--progress"]) == 0
    captured = capsys.readouterr()
    assert "100% done" in captured.err and "%" not in captured.out.split("\n")[0]
    assert "tier: Platinum" in captured.out


def test_the_build_runs_without_the_cyclic_gc_and_gives_it_back(tmp_path):
    """The cyclic GC is off while a build runs (reports/build.py: _no_cyclic_gc) and as it was afterwards: on in the
    callback's controller process, which goes on running tasks, and still off where the caller had it off."""
    import gc

    class Seen(Progress):
        def __call__(self, fraction, label=""):
            self.gc_on = getattr(self, "gc_on", []) + [gc.isenabled()]

    run_dir = make_run(tmp_path, "excellent")
    assert gc.isenabled()
    seen = Seen(enabled=False)
    build(str(run_dir), rubric=RUBRIC, analyst=ANALYST_GOOD, progress=seen)
    assert len(seen.gc_on) >= 5 and not any(seen.gc_on) and gc.isenabled()
    gc.disable()
    try:
        build(str(run_dir), rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False, report_dir=str(tmp_path / "again"))
        assert not gc.isenabled()
    finally:
        gc.enable()


# --- A number shown beside a verdict stays on its side of the line (reports/shown.py): the tables' fmt, the storage
# section's tables against the checks that judged what they show, and report.js's sort of such cells.

def test_a_table_number_beside_a_checks_line_is_not_rounded_onto_it():
    """fmt shows 3 significant digits under 100 and no decimals from 100 up: 99.96 MiB/s was "100" beside a floor of
    100 it missed, 499.7 "500" beside a warn line of 500. Given the lines, it adds the digits that keep the side."""
    assert markdown.fmt(99.96, thresholds=[100, 500]) == "99.96"
    assert markdown.fmt(499.7, thresholds=[100, 500]) == "499.7"
    assert markdown.fmt(199.6, thresholds=(200, 1000)) == "199.6"
    assert markdown.fmt(0.4999, thresholds=[0.05, 0.5]) == "0.4999"
    assert markdown.fmt_tenths(69.96, thresholds=[70, 85]) == "69.96"
    assert markdown.fmt_tenths(849.96, thresholds=[850]) == "849.96"
    # on a line, or far from every line: as before
    assert markdown.fmt(100.0, thresholds=[100, 500]) == "100" and markdown.fmt(0.5, thresholds=[0.5]) == "0.5"
    assert markdown.fmt(812.5, thresholds=[100, 500]) == "812" and markdown.fmt(12.34, thresholds=[100]) == "12.3"
    # without lines: unchanged
    assert (markdown.fmt(99.96), markdown.fmt(499.7), markdown.fmt(0.4999), markdown.fmt_tenths(69.96)) == (
        "100", "500", "0.5", "70")
    assert markdown.fmt(None, thresholds=[1]) is None


def _io_tools_run(tmp_path):
    """One node's IOR and mdtest results as probes/storage/io_tools_run.py records them: a write just under the
    100 MiB/s floor, a read under the 500 MiB/s warn line, file creates under the 200/s floor."""
    from run_dirs import write_and_load_run

    from probes.artifact import Artifact

    art = Artifact("io_tools_run", "r", "n1", variant="scratch")
    art.facts.update(tier="scratch", launcher="mpirun")
    art.add("ior_bw_mib_s", 99.96, "MiB/s", tool="ior", operation="write", scope="node", tasks=8)
    art.add("ior_bw_mib_s", 499.7, "MiB/s", tool="ior", operation="read", scope="node", tasks=8)
    art.add("mdtest_ops_per_s", 199.6, "ops/s", tool="mdtest", operation="file_creation", scope="node", tasks=8)
    return write_and_load_run(tmp_path, [art], ["n1"], "standard")


def _storage_rubric():
    from reports.grading import load_rubric

    rubric = load_rubric()
    return dict(rubric, checks=[c for c in rubric["checks"] if c["id"].startswith("storage.")])


def test_the_storage_io_tools_table_shows_each_value_on_the_side_of_its_checks_lines(tmp_path):
    from reports.grading import grade
    from reports.phases.storage.section import io_tools_part

    run = _io_tools_run(tmp_path)
    rows = {r["check_id"]: r for r in grade(run, _storage_rubric())}
    assert [rows[c]["status"] for c in ("storage.ior_write", "storage.ior_read", "storage.mdtest_file_create")] == [
        "fail", "warn", "fail"]
    row = "| scratch | n1 | 8 | 99.96 | 499.7 | 199.6 | – | – | – | – |"
    assert row in markdown.render(io_tools_part(run))
    # a run not graded here: the shipped rubric's lines
    assert row in markdown.render(io_tools_part(_io_tools_run(tmp_path / "again")))


def test_the_storage_fio_and_checkpoint_tables_show_each_value_on_the_side_of_its_checks_lines(tmp_path):
    """fio at one client (the aggregate is that client's one process, the value storage.fio_seq_bw and fio_rand_iops
    judge) and its p99 (the worst client's own, as fio_p99_latency judges each client's); torch.save's rate per rank
    as storage.ckpt_save and ckpt_load judge it (the probe rounds GB/s to 4 decimals)."""
    from run_dirs import write_and_load_run

    from probes.artifact import Artifact
    from reports.grading import grade
    from reports.phases.storage.section import checkpoint_part, fio_part

    fio = Artifact("fio_sweep", "r", "n1", variant="shared")
    fio.facts.update({"role": "driver", "tier_path": "/x", "tier_shared": True, "size_mib": 4, "runtime_s": 1})
    for workload, metric, value, unit in (("seq_read_buffered", "fio_bw_bytes", 99.96e6, "B/s"),
                                          ("rand_read_buffered", "fio_iops", 199.6, "IOPS")):
        labels = {"tier": "shared", "workload": workload, "clients": 1}
        for scope, extra in (("aggregate", {}), ("client", {"client": "n1", "jobs": 1})):
            fio.add(metric, value, unit, scope=scope, **extra, **labels)
            fio.add("fio_clat_p99_us", 50040.0, "us", scope=scope, **extra, **labels)
    ckpt = Artifact("checkpoint", "r", "n1", variant="shared")
    for metric, value, unit in (("ckpt_bytes", 2 * 2**20, "B"), ("ckpt_save_gbps", 0.4999, "GB/s"),
                                ("ckpt_load_gbps", 0.0499, "GB/s")):
        ckpt.add(metric, value, unit, method="torch_save", scope="rank", tier="shared")
    run = write_and_load_run(tmp_path, [fio, ckpt], ["n1"], "standard")
    rows = {(r["check_id"], r["subject"]): r["status"] for r in grade(run, _storage_rubric())}
    assert rows[("storage.fio_seq_bw", "tier=shared workload=seq_read_buffered c=1")] == "fail"
    assert rows[("storage.fio_rand_iops", "tier=shared workload=rand_read_buffered c=1")] == "fail"
    assert rows[("storage.fio_p99_latency", "tier=shared workload=seq_read_buffered c=1")] == "warn"
    assert (rows[("storage.ckpt_save", "tier=shared")], rows[("storage.ckpt_load", "tier=shared")]) == (
        "warn", "fail")
    md = markdown.render(fio_part(run, None))
    assert "| seq_read_buffered | 1 | 99.96 | – | 0 | 0 | 50.04 |" in md, md
    assert "| rand_read_buffered | 1 | 0 | 199.6 | 0 | 0 | 50.04 |" in md, md
    md = markdown.render(checkpoint_part(run))
    assert "| n1 | shared | torch_save | – | rank | 2 | 0.4999 | 0.0499 |" in md, md


REPORT_JS = Path(__file__).resolve().parents[2] / "reports" / "render" / "templates" / "report.js"
# report.js run in node on stand-ins for the DOM it uses: each table.sortable's header cells (their click handlers),
# its body rows (appendChild moves a row to the end); prints each table's first column after the clicks asked for.
SORT_HARNESS = r"""
const fs = require('fs'), vm = require('vm');
const cases = JSON.parse(process.argv[3]);
const tables = cases.map(function (c) {
  const ths = c.header.map(function (h) {
    return {textContent: h, dataset: {}, handlers: {}, addEventListener: function (ev, f) { this.handlers[ev] = f; }};
  });
  const body = {rows: c.rows.map(function (r) { return {cells: r.map(function (t) { return {textContent: t}; })}; }),
                appendChild: function (r) { this.rows.splice(this.rows.indexOf(r), 1); this.rows.push(r); }};
  return {tHead: {rows: [{cells: ths}]}, tBodies: [body], ths: ths, clicks: c.clicks};
});
const document = {getElementById: function () { return null; },
                  querySelectorAll: function (sel) { return sel === 'table.sortable' ? tables : []; }};
vm.runInNewContext(fs.readFileSync(process.argv[2], 'utf8'), {document: document, location: {hash: ''}});
console.log(JSON.stringify(tables.map(function (t) {
  t.clicks.forEach(function (i) { t.ths[i].handlers.click(); });
  return t.tBodies[0].rows.map(function (r) { return r.cells[t.clicks[0]].textContent; });
})));
"""


def _sorted_by_report_js(tmp_path, cases):
    import json
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: report.js's sort is tested in the browser (tests/integration)")
    harness = tmp_path / "sort_harness.js"
    harness.write_text(SORT_HARNESS)
    out = subprocess.run([node, str(harness), str(REPORT_JS), json.dumps(cases)], capture_output=True, text=True,
                         check=True, timeout=60)
    return json.loads(out.stdout)


def test_report_js_sorts_a_number_with_its_unit_as_a_number_and_statuses_worst_first(tmp_path):
    """A host page's observed column ("99.96 MiB/s", a straggler's "701.3 (12.0% below cluster median)") sorted as
    text put 1450 before 812.5 before 99.96; the hosts table's worst column sorted alphabetically (error, fail,
    pass, skip, warn). A cell that starts with a number sorts by it, whatever follows; a status by its rank in
    rate.WORST_ORDER, the order the report's "worst first" uses."""
    from reports.rate import WORST_ORDER

    observed = ["99.96 MiB/s", "812.5 MiB/s", "1450 MiB/s", "103.24 MiB/s"]
    straggler = ["701.3 (12.0% below cluster median)", "795.2 (0.0% below cluster median)",
                 "98.1 (87.6% below cluster median)"]
    worst = ["pass", "warn", "fail", "error", "skip", "FAIL"]
    cases = [{"header": ["observed"], "rows": [[t] for t in observed], "clicks": [0]},
             {"header": ["observed"], "rows": [[t] for t in observed], "clicks": [0, 0]},
             {"header": ["observed"], "rows": [[t] for t in straggler], "clicks": [0]},
             {"header": ["worst"], "rows": [[t] for t in worst], "clicks": [0]},
             {"header": ["worst"], "rows": [[t] for t in worst], "clicks": [0, 0]},
             # plain numbers as before; a cell that is no number after the numbers; an address is no number
             {"header": ["n"], "rows": [["10"], ["–"], ["9"], ["-2.5 %"], ["100"]], "clicks": [0]},
             {"header": ["host"], "rows": [["10.0.0.12"], ["10.0.0.9"], ["n1"]], "clicks": [0]}]
    got = _sorted_by_report_js(tmp_path, cases)
    assert got[0] == ["99.96 MiB/s", "103.24 MiB/s", "812.5 MiB/s", "1450 MiB/s"]
    assert got[1] == got[0][::-1]
    assert got[2] == [straggler[2], straggler[0], straggler[1]]
    assert [s.lower() for s in got[3]] == ["fail", "fail", "error", "warn", "pass", "skip"]
    assert tuple(dict.fromkeys(s.lower() for s in got[3])) == WORST_ORDER
    assert [s.lower() for s in got[4]] == ["skip", "pass", "warn", "error", "fail", "fail"]
    assert got[5] == ["-2.5 %", "9", "10", "100", "–"]
    assert got[6] == ["10.0.0.12", "10.0.0.9", "n1"]
