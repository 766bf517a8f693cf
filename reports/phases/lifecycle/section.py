"""Report section of the lifecycle phase: pip and uv installs and imports per host × tier × tool, internet speed,
container pulls, model downloads, vllm serve, and every probe that was skipped or failed with its reason.

Plot (PNG, matplotlib Agg) beside report.md: install time (venv + install) and import time per tier, side by side,
one bar per tool (and cold/warm for imports), the median over hosts with the range of hosts as an error bar.
"""

import statistics

from reports.grading.rubric import graded_checks
from reports.grading.select import labels_match
from reports.phases.lifecycle.grade import lines as check_lines
from reports.render import markdown, plots
from reports.render.blocks import Heading, Paragraph, Table, code, figure, joined
from reports.render.markdown import fmt

ORDER = 55
PLOT = "lifecycle_tiers.png"
PROBES = ("net_speed", "pkg_install", "container_pull", "model_pull", "serve_ready")


def lines_of(run):
    """get(probe, metric, labels): the lines a value of that probe, metric and labels was judged against (the
    lifecycle_metric checks whose labels it has, as the run was graded), so that the tables show it on the side of
    each that the check's row did (reports/shown.py); each answer kept for the rows that ask again."""
    known = {}

    def get(probe, metric, labels):
        key = (probe, metric, tuple(sorted((k, str(v)) for k, v in labels.items())))
        if key not in known:
            known[key] = [line for c in graded_checks(run, lambda c: (
                c.get("kind") == "lifecycle_metric" and c.get("probe") == probe and c.get("metric") == metric
                and labels_match(labels, c.get("labels")))) for line in check_lines(c)]
        return known[key]
    return get


def _counted_interfaces(docs):
    """The container_pull artifacts' facts.rx_interfaces: per host and registry, the interfaces counted, by which
    rule, and the ones left out with why (None without any)."""
    rows = [[d["host"], registry, ", ".join(f.get("counted") or []) or None, f.get("rule"),
             "; ".join("%s: %s" % kv for kv in sorted((f.get("left_out") or {}).items())) or None]
            for d in docs for registry, f in sorted(((d.get("facts") or {}).get("rx_interfaces") or {}).items())]
    return Table(["host", "registry", "counted", "why these", "left out"], rows) if rows else None


def _docs(run, probe):
    return sorted((d for d in run.artifacts if d["probe"] == probe), key=lambda d: d["host"])


def install_rows(run):
    """{(host, tier, tool): {metric or metric/cache: value}} of the pkg_install results."""
    out = {}
    for r in run.records("pkg_install"):
        lab = r["labels"]
        key = (r["host"], lab.get("tier"), lab.get("tool"))
        name = r["metric"] + ("/" + lab["cache"] if "cache" in lab else "")
        out.setdefault(key, {})[name] = r["value"]
    return out


def per_tier(rows, metric):
    """{tier: {tool: [values over hosts]}} of one metric (e.g. total_s, import_s/cold)."""
    out = {}
    for (_, tier, tool), m in rows.items():
        if metric in m:
            out.setdefault(tier, {}).setdefault(tool, []).append(m[metric])
    return out


def _plot(rows, report_dir):
    tiers = sorted({t for _, t, _ in rows})
    tools = sorted({tool for _, _, tool in rows})
    panels = [("install: venv + install", [("total_s", tool, tool) for tool in tools]),
              ("import from the environment", [("import_s/%s" % c, tool, "%s %s" % (tool, c))
                                               for tool in tools for c in ("cold", "warm")])]
    made = plots.figure(max(8, 3 + 2.2 * len(tiers)), 4, 1, 2)
    if made is None:
        return None
    fig, axes = made
    for ax, (title, series) in zip(axes, panels):
        width = 0.8 / max(1, len(series))
        for k, (metric, tool, label) in enumerate(series):
            data = per_tier(rows, metric)
            meds, lows, highs = [], [], []
            for tier in tiers:
                values = data.get(tier, {}).get(tool) or [float("nan")]
                med = statistics.median(values)
                meds.append(med)
                lows.append(med - min(values))
                highs.append(max(values) - med)
            xs = [i + k * width for i in range(len(tiers))]
            ax.bar(xs, meds, width, yerr=[lows, highs], capsize=3, label=label)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tiers))], tiers)
        ax.set_ylabel("seconds (median over hosts, bar: range)")
        ax.set_title(title)
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Lifecycle: install and import time per storage tier")
    return plots.save(fig, report_dir, PLOT)


def install_part(run, report_dir):
    rows = install_rows(run)
    docs = _docs(run, "pkg_install")
    out = [Heading(3, "Installs and imports per tier")]
    if not docs:
        return out + [Paragraph("pkg_install did not run in this run.")]
    if not rows:
        reasons = sorted({d.get("reason") or "no result" for d in docs})
        return out + [Paragraph("Not measured: %s" % "; ".join(reasons))]
    facts = [d.get("facts") or {} for d in docs]
    packages = sorted({" ".join(f.get("packages") or []) for f in facts} - {""})
    index = sorted({f.get("index") for f in facts} - {None})
    module = sorted({f.get("import_module") for f in facts} - {None})
    drops = sorted({f.get("cache_drop").split(" on ")[0] for f in facts if f.get("cache_drop")})
    if packages:
        out.append(Paragraph(["Packages: "] + joined([code(p) for p in packages])
                             + ["; index: %s; imported module: " % ("; ".join(index) or "–"),
                                code(", ".join(module) or "–"), "; cold = after %s." % (", ".join(drops) or "–")]))
    out += figure(_plot(rows, report_dir) if report_dir else None, "install and import time per tier")
    table = []
    judged = lines_of(run)

    def cell(m, name, tier, tool):
        metric, _, cache = name.partition("/")
        labels = dict({"tier": tier, "tool": tool}, **({"cache": cache} if cache else {}))
        return fmt(m.get(name), thresholds=judged("pkg_install", metric, labels))
    for (host, tier, tool), m in sorted(rows.items()):
        doc = next((d for d in docs if d["host"] == host), {})
        versions = ((doc.get("facts") or {}).get("versions") or {}).get("%s/%s" % (tier, tool)) or {}
        wanted = [p.split("[")[0].split("=")[0].split("<")[0].split(">")[0].strip().lower()
                  for p in (doc.get("facts") or {}).get("packages") or []]
        shown = ", ".join("%s %s" % (n, versions[n]) for n in wanted if n in versions)
        table.append([host, tier, tool, fmt(m.get("venv_s")), cell(m, "install_s", tier, tool), fmt(m.get("total_s")),
                      cell(m, "import_s/cold", tier, tool), cell(m, "import_s/warm", tier, tool),
                      fmt(m.get("env_bytes", 0) / 2**20) if m.get("env_bytes") else None, shown or None])
    if table:
        out.append(Table(["host", "tier", "tool", "venv s", "install s", "total s", "import cold s", "import warm s",
                          "env MiB", "versions"], table))
    tier_lines = []
    for d in docs:
        f = d.get("facts") or {}
        for t in f.get("tiers") or []:
            tier_lines.append([d["host"], t.get("name"), t.get("path"), t.get("fstype"),
                               "shared" if t.get("shared") else "private"])
        for path, why in sorted((f.get("tiers_left_out") or {}).items()):
            tier_lines.append([d["host"], "–", path, "left out", why])
    if tier_lines:
        out += [Paragraph("Tiers (%s):" % "; ".join(sorted({(d.get("facts") or {}).get("tiers_from") or "?"
                                                            for d in docs}))),
                Table(["host", "tier", "path", "filesystem", "kind"], tier_lines)]
    return out


def _shown(r, judged, probe):
    """A result as the tables show it: a bound (a transfer or start that reached its timeout) as "≤ 40" / "≥ 600";
    on the side of the lines its check judged it against (judged: lines_of) that the check's row shows it."""
    if r is None:
        return None
    text = fmt(r["value"], thresholds=judged(probe, r["metric"], r["labels"]))
    mark = {"at_most": "≤ ", "at_least": "≥ "}.get(r["labels"].get("bound"), "")
    return mark + text


def transfer_part(run):
    out = []
    judged = lines_of(run)
    net = run.records("net_speed")
    if net:
        rows = sorted((r["host"], r["metric"].replace("_mbps", ""), r["labels"].get("url"),
                       _shown(r, judged, "net_speed")) for r in net if r["metric"].endswith("_mbps"))
        out += [Heading(3, "Internet speed"), Table(["host", "direction", "URL", "Mbit/s"], rows)]
    pulls = run.records("container_pull")
    if pulls:
        by = {}
        for r in pulls:
            key = (r["host"], r["labels"].get("engine"), r["labels"].get("image"))
            by.setdefault(key, {})[r["metric"]] = r
        # the rate is over the bytes received (wire_bytes, the counted interfaces), not the image's size (docker's
        # is unpacked: ubuntu:24.04 78 MB for 30 MB pulled), so both are shown
        rows = [[h, e, i, _shown(m.get("pull_s"), judged, "container_pull"),
                 fmt(m["wire_bytes"]["value"] / 1e6) if m.get("wire_bytes") else None,
                 fmt(m["image_bytes"]["value"] / 1e6) if m.get("image_bytes") else None,
                 _shown(m.get("pull_mbps"), judged, "container_pull")] for (h, e, i), m in sorted(by.items())]
        out += [Heading(3, "Container pulls"),
                Table(["host", "engine", "image", "pull s", "received MB", "image MB", "Mbit/s"], rows),
                Paragraph("Mbit/s is over the bytes received; without interface counters, over the image's size, "
                          "an upper bound (≤).")]
        counted = _counted_interfaces(_docs(run, "container_pull"))
        if counted:
            out += [Paragraph("Where the received bytes of a pull were counted (each byte once: a bridge, a bond and "
                              "a VLAN count the bytes of the interface under them again):"), counted]
    models = run.records("model_pull")
    if models:
        by = {}
        for r in models:
            by.setdefault((r["host"], r["labels"].get("hub"), r["labels"].get("model")), {})[r["metric"]] = r
        rows = [[h, hub, model, _shown(m.get("download_s") or m.get("process_s"), judged, "model_pull"),
                 fmt(m["model_bytes"]["value"] / 1e6) if m.get("model_bytes") else None,
                 _shown(m.get("download_mbps"), judged, "model_pull")] for (h, hub, model), m in sorted(by.items())]
        out += [Heading(3, "Model downloads"), Table(["host", "hub", "model", "s", "MB", "Mbit/s"], rows)]
    serve = [r for r in run.records("serve_ready") if r["metric"] == "ready_s"]
    if serve:
        rows = [[r["host"], r["labels"].get("model"), _shown(r, judged, "serve_ready")]
                for r in sorted(serve, key=lambda r: r["host"])]
        out += [Heading(3, "vllm serve"), Table(["host", "model", "s until /v1/models answers"], rows)]
    return out


def not_run_part(run):
    """Every probe that was skipped or failed, and every tool/engine/hub/URL/step it left out, with the reason."""
    rows = []
    for probe in PROBES:
        for d in _docs(run, probe):
            if d["status"] != "ok":
                rows.append([d["host"], probe, "–", d["status"], d.get("reason")])
                continue
            f = d.get("facts") or {}
            for key, label in (("skipped_tools", "skipped"), ("skipped_engines", "skipped"), ("skipped", "skipped"),
                               ("unreachable", "unreachable"), ("failures", "failed")):
                for what, why in sorted((f.get(key) or {}).items()):
                    rows.append([d["host"], probe, what, label, why])
    if not rows:
        return []
    return [Heading(3, "Skipped or failed"), Table(["host", "probe", "what", "status", "reason"], rows)]


def blocks(run, rows, report_dir):
    if not any(d["probe"] in PROBES for d in run.artifacts):
        return []
    return [Heading(2, "Lifecycle")] + install_part(run, report_dir) + transfer_part(run) + not_run_part(run)


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
