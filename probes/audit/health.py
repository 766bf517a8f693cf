"""Health-monitoring facts for the audit: node health-check agents (NHC, NVSentinel, gpud) and, when DCGM is
installed, the quick DCGM diagnostic `dcgmi diag -r 1` (seconds; it tests, it does not change settings)."""

import json
import os
import shutil

NHC_PATHS = ("/usr/sbin/nhc", "/usr/local/sbin/nhc", "/usr/bin/nhc")
NHC_CONFS = ("/etc/nhc/nhc.conf", "/usr/local/etc/nhc/nhc.conf")


def parse_dcgm_diag(text):
    """`dcgmi diag -r 1 -j` -> {"tests": {name: status}, "failed": [...], "warned": [...]} (DCGM 3 and 4 layouts)."""
    data = json.loads(text)
    tests = {}

    def worst(statuses):
        order = ["fail", "warn", "pass", "skip"]
        lowered = [s.lower() for s in statuses if isinstance(s, str)]
        for s in order:
            if any(x.startswith(s) for x in lowered):
                return s
        return lowered[0] if lowered else None

    def walk(node):
        if isinstance(node, dict):
            name = node.get("name") or node.get("test_name")
            results = node.get("results")
            if name and isinstance(results, list):
                statuses = [r.get("status") for r in results if isinstance(r, dict)]
                tests[str(name)] = worst(statuses)
            elif name and isinstance(node.get("status"), str) and "category" not in node:
                tests.setdefault(str(name), worst([node["status"]]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    return {"tests": tests, "failed": sorted(k for k, v in tests.items() if v == "fail"),
            "warned": sorted(k for k, v in tests.items() if v == "warn")}


def collect(c, run_diag=True):
    out = {
        "nhc": next((p for p in NHC_PATHS if os.path.exists(p)), None),
        "nhc_conf": next((p for p in NHC_CONFS if os.path.exists(p)), None),
        "nvsentinel_config": os.path.isdir("/etc/nvsentinel"),
        "dcgmi": shutil.which("dcgmi") is not None,
    }
    c.mark("health_agents", "ok")
    if not out["dcgmi"]:
        c.mark("dcgm_diag", "missing", "dcgmi not found (DCGM not installed)")
        return out
    if not run_diag:
        c.mark("dcgm_diag", "not_applicable", "audit_dcgm_diag is false: dcgmi diag -r 1 was not run")
        return out
    res = c.cmd("dcgm_diag", ["dcgmi", "diag", "-r", "1", "-j"], timeout=90, ok_rcs=(0, 226, 255, 1))
    if res.rc is not None and res.stdout.strip().startswith("{"):
        c.save_raw("dcgmi-diag-r1.txt", res.stdout)
        try:
            out["dcgm_diag"] = parse_dcgm_diag(res.stdout)
            c.mark("dcgm_diag", "ok")
        except ValueError as exc:
            c.mark("dcgm_diag", "error", "unreadable JSON from dcgmi diag: %s" % exc)
    elif res.rc is not None:
        text = (res.stdout + res.stderr).strip()
        c.mark("dcgm_diag", "error", "dcgmi diag exit %s: %s" % (res.rc, text.splitlines()[0][:200] if text else ""))
    return out
