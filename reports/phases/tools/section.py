"""Report section of the tools step: per node, every tool the probes need and whether it was found, installed,
built, copied from an identical node, or is missing, with the reason (the command, its last lines, the variable).

"Installed" is measured: a package counts as installed by the run only when tools_detect saw it missing before
the package step and present after it.
"""

from probes.tools import PROBES as TOOLS_PROBES
from reports.render import markdown
from reports.render.blocks import Heading, Paragraph, Table, code

ORDER = 15
STATE_WORD = {"present": "found", "built": "built", "copied": "copied", "waiting": "missing", "failed": "failed",
              "missing": "missing", "off": "off", "not_applicable": "not applicable"}


def _doc(run, host, probe, variant=None):
    return next((d for d in run.artifacts if d["host"] == host and d["probe"] == probe
                 and d.get("variant") == variant), None)


def _short(text, limit=300):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _venv_row(label, doc, holds, why=""):
    """The row of a venv the step makes (tools_venv's, tools_inference's): what it holds and where, or why not."""
    f = doc.get("facts") or {}
    if doc["status"] == "ok":
        return [label, "found" if f.get("reused") else "installed", "%s in %s" % (holds, f.get("venv")), _short(why)]
    return [label, doc["status"], f.get("key") or "", _short(doc.get("reason"))]


def host_rows(run, host):
    """[tool, state, detail, reason] rows of one node."""
    before = (_doc(run, host, "tools_detect", "before") or {}).get("facts") or {}
    after_doc = _doc(run, host, "tools_detect", "after") or {}
    after = after_doc.get("facts") or {}
    env = after.get("assess_tools") or {}
    missing = env.get("missing") or {}
    rows = []
    for tool, rec in sorted((after.get("packages") or {}).items()):
        was = ((before.get("packages") or {}).get(tool) or {}).get("installed")
        now = rec.get("installed")
        state = ("found" if was and now else "installed" if now else "unknown" if now is None else "missing")
        why = rec.get("note") or (missing.get({"openmpi": "mpi"}.get(tool, tool)) if state == "missing" else "")
        rows.append([tool, state, ", ".join(rec.get("names") or []), _short(why)])
    mpi = after.get("mpi")
    if mpi:
        rows.append(["MPI", "found", "%s %s, %s" % (mpi["kind"], mpi.get("version") or "", mpi["bin"]), ""])
    venv = _doc(run, host, "tools_venv")
    if venv:
        f = venv.get("facts") or {}
        rows.append(_venv_row("probe venv", venv, "torch %s (%s)" % (f.get("installed_torch"), f.get("variant")),
                              f.get("why")))
    engine = _doc(run, host, "tools_inference")
    if engine:
        f = engine.get("facts") or {}
        rows.append(_venv_row("vLLM venv", engine, "%s %s" % (f.get("engine_dist"), f.get("engine_version"))))
    for tool, rec in sorted(((after.get("package_step") or {}).get("builds") or {}).items()):
        detail = rec.get("bin_dir") or ""
        if rec.get("binaries"):
            detail += " (%s)" % ", ".join(rec["binaries"][:6])
        rows.append([tool, STATE_WORD.get(rec.get("state"), rec.get("state")), detail, _short(rec.get("reason"))])
    if after_doc and after_doc.get("status") != "ok":
        rows.append(["tools_detect", after_doc["status"], "", _short(after_doc.get("reason"))])
    return rows


def blocks(run, rows, report_dir):
    hosts = sorted({d["host"] for d in run.artifacts if d["probe"] in TOOLS_PROBES})
    if not hosts:
        return []
    out = [Heading(2, "Tools")]
    for host in hosts:
        after = (_doc(run, host, "tools_detect", "after") or _doc(run, host, "tools_detect", "before") or {})
        f = after.get("facts") or {}
        env = f.get("assess_tools") or {}
        osr = f.get("os") or {}
        line = ["%s, prefix " % (osr.get("pretty_name") or osr.get("id") or "unknown OS"), code(f.get("prefix") or "?"),
                ", probes run under ", code(env.get("python") or (f.get("python") or {}).get("python") or "?")]
        out += [Heading(3, host), Paragraph(line), Table(["tool", "state", "detail", "reason"], host_rows(run, host))]
    return out


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
