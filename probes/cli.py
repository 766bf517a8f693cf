"""`python -m probes <name> --out DIR …`: runs one probe and always leaves one artifact behind.

A probe that raises, or runs past --timeout, still produces an artifact with status "error" and the reason,
plus the traceback as a raw file: what was measured before the fault is kept, nothing is silently lost.
The params are resolved against the probe's declaration first (probes/params.py): an unknown param or a value of
the wrong type makes an error artifact naming it, and a non-empty `skip` a skipped one, before the probe runs.
With --inline the artifact and its raw files are also printed on stdout as one JSON manifest, so the
controller gets everything back in the same SSH round trip that ran the probe.
"""

import argparse
import base64
import contextlib
import faulthandler
import importlib
import json
import math
import os
import socket
import sys
import traceback

from probes import __version__
from probes.artifact import Artifact, artifact_filename, json_safe, validate, write_json_atomic
from probes.common.time_limit import ProbeTimeout, time_limit
from probes.params import ParamError
from probes.registry import PROBES

# Raw files larger than this are left on the node and fetched separately by the controller.
INLINE_LIMIT_BYTES = 8 * 1024 * 1024
# Seconds past its --timeout after which a probe that is still going dumps every thread's stack to stderr.
STUCK_GRACE_S = 15


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="probes", description="clustermax.assess node probes")
    parser.add_argument("name", help="probe to run (%s), or 'list'" % ", ".join(sorted(PROBES)))
    parser.add_argument("--out", default=".", help="directory for the artifact and its raw files")
    parser.add_argument("--run-id", default="adhoc", help="assessment run id recorded in the artifact")
    parser.add_argument("--host", default=None, help="inventory name of this node (default: hostname)")
    parser.add_argument("--variant", default=None, help="variant name, part of the artifact file name")
    parser.add_argument("--params", default="{}", help="probe parameters as a JSON object")
    parser.add_argument("--timeout", type=float, default=0, help="seconds before the probe is stopped (0: none)")
    parser.add_argument("--inline", action="store_true", help="print a JSON manifest with the artifact content")
    parser.add_argument("--help-params", action="store_true", help="list the probe's params and exit")
    parser.add_argument("--lock", default=None,
                        help="the run lock this run holds on the node: touched while the probe runs (its heartbeat)")
    return parser.parse_args(argv)


def use_tools(tools):
    """What the tools step installed under its prefix goes in front of PATH and LD_LIBRARY_PATH, so that every
    probe (and every tool it starts) finds the built nccl-tests, nvbandwidth and an MPI kept off PATH."""
    for var, dirs in (("PATH", tools.get("path")), ("LD_LIBRARY_PATH", tools.get("ld_library_path"))):
        dirs = [d for d in (dirs or []) if d]
        if dirs:
            os.environ[var] = os.pathsep.join(dirs + [d for d in os.environ.get(var, "").split(os.pathsep) if d])


def run_probe(name, out_dir, run_id, host, variant=None, params=None, timeout=0):
    """Run a probe in this process; returns (artifact path, artifact dict). The artifact records the params as
    given; the probe gets them resolved against its declaration."""
    params = dict(params or {})
    art = Artifact(name, run_id, host, variant=variant, params=params, tool_version=__version__)
    os.makedirs(out_dir, exist_ok=True)
    limit = time_limit(timeout) if timeout and timeout > 0 else contextlib.nullcontext()
    if timeout and timeout > 0:
        # A probe still going well past its own time limit is stuck where the limit cannot reach it (a C call that
        # does not return to Python, or a cleanup that waits): every thread's stack goes to stderr, which the caller
        # keeps, so a stuck probe says where it was.
        faulthandler.dump_traceback_later(timeout + STUCK_GRACE_S, exit=False)
    try:
        with limit:  # stopped before any of the handlers below runs
            module = importlib.import_module(PROBES[name])
            resolved = module.PARAMS.resolve(name, params)
            use_tools(resolved["tools_step"])
            skip = resolved["skip"].strip()
            if skip:
                art.skip(skip)
            else:
                module.run(art, resolved, out_dir)
    except ParamError as exc:
        art.error(str(exc))  # what was asked is wrong, not the probe: no traceback
    except ProbeTimeout:
        art.error("timed out after %g s" % timeout)
    except Exception as exc:  # noqa: BLE001 - any fault becomes data in the artifact
        art.error("%s: %s" % (type(exc).__name__, exc))
        tb_name = artifact_filename(name, variant).replace(".json", ".traceback.txt")
        try:
            with open(os.path.join(out_dir, tb_name), "w") as fh:
                fh.write(traceback.format_exc())
            art.raw.append(tb_name)
        except OSError:
            pass  # a full disk: the reason above says what failed, the results are kept
    if timeout and timeout > 0:
        faulthandler.cancel_dump_traceback_later()
    doc = art.to_dict()
    problems = validate(doc)
    if problems:
        # A probe bug must not produce an artifact the controller rejects: keep what is valid and say why.
        doc.update(status="error", reason="invalid artifact: " + "; ".join(problems[:5]), results=[
            r for r in doc["results"] if isinstance(r, dict) and not isinstance(r.get("value"), bool)
            and isinstance(r.get("value"), (int, float)) and math.isfinite(r["value"])])
    # NaN, inf or an object JSON cannot hold in the facts or labels makes the writer (and the manifest) refuse the
    # whole artifact: written as text instead, the artifact keeps everything else measured, and says what it changed
    doc, not_json = json_safe(doc)
    if not_json:
        doc["status"] = "error"
        doc["reason"] = "; ".join(x for x in (doc.get("reason"), "not JSON, written as text: %s" % ", ".join(
            not_json[:5])) if x)
    try:
        path = write_json_atomic(os.path.join(out_dir, artifact_filename(name, variant)), doc)
    except OSError as exc:
        # A full or read-only disk on the node: what was measured is still here, and goes back in the manifest.
        doc["status"] = "error"
        doc["reason"] = "; ".join(x for x in (doc.get("reason"), "artifact not written on the node: %s" % exc) if x)
        path = None
    return path, doc


def manifest(path, doc, out_dir):
    """Everything the controller needs back: the artifact and, when small enough, its raw files."""
    files = {}
    left = []
    budget = INLINE_LIMIT_BYTES
    for raw_name in doc["raw"]:
        raw_path = os.path.join(out_dir, raw_name)
        try:
            size = os.path.getsize(raw_path)
        except OSError:
            continue
        if size <= budget:
            with open(raw_path, "rb") as fh:
                files[raw_name] = base64.b64encode(fh.read()).decode("ascii")
            budget -= size
        else:
            left.append(raw_path)
    return {"artifact_path": path, "artifact": doc, "raw_inline": files, "raw_remote": left}


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.name == "list":
        print("\n".join(sorted(PROBES)))
        return 0
    if args.name not in PROBES:
        print("unknown probe %r; known: %s" % (args.name, ", ".join(sorted(PROBES))), file=sys.stderr)
        return 2
    if args.help_params:
        print("params of probe %s (--params '{\"name\": value, ...}'):" % args.name)
        print(importlib.import_module(PROBES[args.name]).PARAMS.describe())
        return 0
    try:
        params = json.loads(args.params)
        if not isinstance(params, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        print("--params must be a JSON object: %s" % exc, file=sys.stderr)
        return 2
    host = args.host or socket.gethostname()
    out_dir = os.path.abspath(args.out)
    if args.lock:
        from probes.common.run_lock import heartbeat  # noqa: PLC0415

        heartbeat(args.lock)
    path, doc = run_probe(args.name, out_dir, args.run_id, host, args.variant, params, args.timeout)
    if args.inline:
        sys.stdout.write(json.dumps(manifest(path, doc, out_dir)) + "\n")
    else:
        print(path)
    return 0
