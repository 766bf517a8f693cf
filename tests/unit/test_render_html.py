"""report.html without a browser: the blocks it renders (the same blocks report.md is written from), embedded
plots, escaping, the rating and checks parts; report.md's rating table; the build's progress bar and summary (what
the callback prints)."""

import base64
import io
import re
from pathlib import Path

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
