"""report.html in a real browser: headless Chromium (Debian's `chromium`) renders it without console errors, the
screenshot is not blank, and the tier, category table and check table are in the DOM after the page's script ran.
A page with a script error is caught the same way (the check can fail)."""

import csv
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from rating_runs import RUBRIC, make_run  # noqa: E402

from reports import phases  # noqa: E402
from reports.build import build  # noqa: E402
from reports.render import plots  # noqa: E402
from reports.render.blocks import Heading, figure  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (Debian package `chromium`)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--hide-scrollbars"]


def chromium(url, *args):
    """(stdout, console lines) of one headless Chromium run with a fresh profile."""
    profile = tempfile.mkdtemp(prefix="cmxa-chromium-")
    try:
        res = subprocess.run([CHROMIUM, *FLAGS, "--user-data-dir=%s" % profile, *args, url], capture_output=True,
                             text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    console = [line for line in res.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return res.stdout, console


def plot_section():
    """A report section that draws a plot, as the phase sections do (reports.render.plots: Agg, PNG in the report
    directory, linked from a figure block)."""
    def blocks(run, rows, report_dir):
        fig, ax = plots.figure(4, 2.5)
        ax.plot([1, 2, 4, 8], [90, 180, 350, 470], marker="o")
        ax.set_title("bus bandwidth")
        return [Heading(2, "Test plots")] + figure(plots.save(fig, report_dir, "test_plot.png"), "bus bandwidth")

    return types.SimpleNamespace(ORDER=99, blocks=blocks, __name__="reports.phases.test_plot.section")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = tmp_path_factory.mktemp("browser")
    run_dir = make_run(base, "excellent", host_overrides={"gn3": {"read_bw_gbps": 1.0}})
    original = phases.sections
    phases.sections = lambda: original() + [plot_section()]
    try:
        # No analyst file: pricing, partnerships and availability are "not measured", coverage 81 % -> Gold
        _, _, report_dir = build(run_dir, rubric=RUBRIC, progress=False)
    finally:
        phases.sections = original
    return Path(report_dir)


@pytest.fixture(scope="module")
def browser(report, tmp_path_factory):
    """One Chromium run: the DOM after the page's script ran, a screenshot, and the console."""
    shot = tmp_path_factory.mktemp("shot") / "shot.png"
    dom, console = chromium((report / "report.html").as_uri(), "--window-size=1280,1600",
                            "--screenshot=%s" % shot, "--dump-dom")
    return dom, shot, console


def test_no_console_errors(browser):
    assert browser[2] == []


def test_screenshot_is_not_blank(browser):
    import matplotlib.image

    pixels = matplotlib.image.imread(str(browser[1]))[..., :3]
    assert pixels.shape[:2] == (1600, 1280)
    assert float(pixels.std()) > 0.05  # a blank (all white) page has 0
    dark = (pixels.mean(axis=2) < 0.5).mean()
    assert 0.005 < dark < 0.5  # text and tables, not a black page
    # the tier badge near the top is coloured (Gold's #f6d365), not white
    top = pixels[:500]
    gold = np.all(np.abs(top - np.array([0xF6, 0xD3, 0x65]) / 255.0) < 0.03, axis=2)
    assert gold.sum() > 2000


def test_tier_category_and_check_tables_are_in_the_dom(browser, report):
    dom = browser[0]
    assert '<div class="tier" id="tier"' in dom and ">Gold<small>" in dom
    categories = dom.split('<table id="categories">', 1)[1].split("</table>", 1)[0]
    assert categories.count("<tr>") == 12 and "Pricing" in categories and "analyst input absent" in categories
    checks = dom.split('id="check-rows"', 1)[1].split("</table>", 1)[0]
    with open(report / "checks.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert checks.count("<tr class=\"row-") == len(rows)
    assert '<tr class="row-fail"><td><code>storage.read_bw</code></td><td>gn3</td>' in checks
    assert 'src="data:image/png;base64,' in dom  # the section's plot travelled inside the page
    assert "<script" in dom and 'class="on" data-status=""' in dom  # the filter buttons are there
    # one id per part, and the table of contents links to each
    assert '<section id="section-test-plot"><h2 id="test-plots">Test plots</h2>' in dom
    assert '<a href="#section-test-plot">Test plots</a>' in dom


def test_a_script_error_would_be_caught(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>notDefined();</script></body></html>")
    _, console = chromium(page.as_uri(), "--dump-dom")
    assert any("Uncaught ReferenceError" in line for line in console)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A 1,000-host run (the golden poor cluster: every host fails a few checks), built once."""
    base = tmp_path_factory.mktemp("fleet")
    run_dir = make_run(base, "poor", hosts=1000, host_overrides={"gn777": {"read_bw_gbps": 0.5}})
    _, _, report_dir = build(run_dir, rubric=RUBRIC, progress=False)
    return Path(report_dir)


def test_a_fleet_report_is_a_summary_page_that_filters_and_a_page_per_host(fleet):
    """report.html stays small (the hosts table, the rows that need attention, at most 2,000), the hosts table filters
    in the browser (#filter= in the address fills its box), and each host's page holds every row of that host."""
    with open(fleet / "checks.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    page = fleet / "report.html"
    assert page.stat().st_size < 5 * 2**20
    assert len(list((fleet / "hosts").glob("*.html"))) == 1000
    dom, console = chromium(page.as_uri() + "#filter=gn777", "--dump-dom")
    assert console == []
    hosts = dom.split('<table class="sortable" id="hosts">', 1)[1].split("</tbody>", 1)[0].split("<tr")[2:]
    assert len(hosts) == 1000
    shown = [row for row in hosts if not row.startswith(" hidden")]
    assert len(shown) == 1 and '<a href="hosts/gn777.html">gn777</a>' in shown[0]
    attention = [r for r in rows if r["status"] in ("fail", "error", "warn")]
    assert len(attention) > 2000
    listed = dom.split('id="check-rows"', 1)[1].split("</table>", 1)[0]
    assert listed.count('<tr class="row-') == 2000 and '<tr class="row-pass">' not in listed
    assert "1000 hosts: listed here are the rows that need attention (fail, error, warn), 2000 of %d, worst first" % (
        len(attention)) in dom
    host_dom, console = chromium((fleet / "hosts" / "gn777.html").as_uri(), "--dump-dom")
    assert console == []
    mine = [r for r in rows if r["host"] == "gn777"]
    assert host_dom.count('<tr class="row-') == len(mine) > 0
    assert '<tr class="row-fail"><td><code>storage.read_bw</code></td><td></td><td class="st st-fail">fail</td>' \
           '<td>0.5' in host_dom
