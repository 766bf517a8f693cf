"""Health-monitoring facts for the audit: node health-check agents (NHC, NVSentinel, gpud) and, when DCGM is
installed, the quick DCGM diagnostic `dcgmi diag -r 1` (seconds; it tests, it does not change settings), read per test
and GPU by probes/audit/dcgm_diag.py."""

import os
import shutil

from probes.audit import dcgm_diag
from probes.audit.dcgm_diag import parse as parse_dcgm_diag  # noqa: F401 - the audit's public name for the reader

NHC_PATHS = ("/usr/sbin/nhc", "/usr/local/sbin/nhc", "/usr/bin/nhc")
NHC_CONFS = ("/etc/nhc/nhc.conf", "/usr/local/etc/nhc/nhc.conf")


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
    diag = ["dcgmi", "diag", "-r", "1"]
    # dcgmi exits 226 when a test failed (DCGM_ST_NVVS_ERROR) and with other codes when it could not run; the output
    # says which, so every exit code is read
    res = c.cmd("dcgm_diag", diag + ["-j"], timeout=90, ok_rcs=range(256))
    if res.rc is None:
        return out
    text = res.stdout + ("\n" + res.stderr if res.stderr.strip() else "")
    if "{" not in res.stdout and not dcgm_diag.hostengine_error(text):
        # no JSON (a dcgmi without -j): the text table carries the same per-test results; a host engine dcgmi cannot
        # reach would only fail the same way again
        res = c.cmd("dcgm_diag", diag, timeout=90, ok_rcs=range(256))
        if res.rc is None:
            return out
        text = res.stdout + ("\n" + res.stderr if res.stderr.strip() else "")
    c.save_raw("dcgmi-diag-r1.txt", text)
    parsed = dcgm_diag.parse(text)
    out["dcgm_diag"] = parsed
    if parsed["error"]:
        c.mark("dcgm_diag", "error", parsed["error"], rc=res.rc)
    else:
        c.mark("dcgm_diag", "ok", None, rc=res.rc)
    return out
