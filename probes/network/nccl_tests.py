"""nccl_tests: NVIDIA's nccl-tests (or ROCm's rccl-tests) on this node's GPUs, text and `-J` JSON parsed.

- Needs GPUs: on a node without them the artifact is skipped with that reason.
- Finds the `<collective>_perf` binaries (params bin_dir, PATH, which holds the tools step's build (roles/tools,
  probes/tools/tools_build.py: nccl-tests with MPI=1), $NCCL_TESTS_DIR, /opt/nccl-tests/build, …); otherwise
  skipped with where it looked and why the tools step has none.
- local launch (default): one process drives every GPU of the node (`-g <gpus>`), on every node at the same time:
  the single-node (NVLink) curve of each node, which is what per-node outliers are judged on.
- mpirun launch (`launcher: mpirun`, more than one host): the first host runs `mpirun` over all hosts (a hostfile
  of the inventory addresses, one rank per GPU, `-g 1`); it needs MPI and SSH between the nodes, as nccl-tests
  does. The other hosts record a skip that points at the first host's artifact.

Every run has a timeout; a run that is stopped at its timeout is reported as a hang after the last size it printed.
Results per (collective, size, placement): time_us, algbw_gbps, busbw_gbps, wrong (#wrong), as nccl-tests printed
them; labels say nodes and ranks. The raw stdout and JSON of each binary are kept beside the artifact.
"""

import os
import shutil

from probes.artifact import artifact_filename
from probes.common import device
from probes.common.command import run_cmd
from probes.common.readers import read_text
from probes.common.tools import not_installed
from probes.network.nccl_output import nranks, parse_json, parse_text
from probes.network.plan import RECORDED_PARAMS, human_bytes
from probes.params import SIZE, Param, Params

DEFAULT_COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"]
SEARCH_DIRS = ["/opt/nccl-tests/build", "/usr/local/nccl-tests/build", "/opt/rccl-tests/build",
               os.path.expanduser("~/nccl-tests/build"), "/usr/local/bin", "/usr/bin"]
PARAMS = Params(
    peers=True,
    launcher=Param(str, "local", "local: every node measures its own GPUs; mpirun: one run across all nodes, "
                                 "launched from the first"),
    collectives=Param(list, DEFAULT_COLLECTIVES, "collectives to run (<collective>_perf binaries)"),
    bin_dir=Param(str, "", "where the nccl-tests binaries are (default: $NCCL_TESTS_DIR, the usual places, PATH)"),
    min_bytes=Param(SIZE, 8, "smallest message (-b)"),
    max_bytes=Param(SIZE, "1G", "largest message (-e)"),
    factor=Param(int, 2, "each message size is the previous one times this (-f)"),
    warmup=Param(int, 5, "warm-up iterations (-w)"),
    iters=Param(int, 20, "timed iterations (-n)"),
    timeout_per_collective=Param(float, 600, "seconds one collective's run may take"),
    env=Param(dict, {}, "environment of the runs (NCCL_*)"),
    **RECORDED_PARAMS,
)


def find_binaries(collectives, dirs):
    """collective -> path of `<collective>_perf` in the first directory that has it (or PATH)."""
    found = {}
    for coll in collectives:
        name = "%s_perf" % coll
        for d in dirs:
            path = os.path.join(d, name)
            if d and os.path.isfile(path) and os.access(path, os.X_OK):
                found[coll] = path
                break
        else:
            path = shutil.which(name)
            if path:
                found[coll] = path
    return found


def supports_json(binary):
    res = run_cmd([binary, "-h"], timeout=20)
    return "-J" in (res.stdout + res.stderr)


def run_one(art, coll, binary, argv_prefix, args, env, timeout, base, out_dir, json_ok):
    """Run one binary; adds its results and returns a failure dict or None."""
    json_name = "%s.%s.json" % (base, coll)
    text_name = "%s.%s.txt" % (base, coll)
    json_path = os.path.join(out_dir, json_name)
    if os.path.exists(json_path):
        os.unlink(json_path)
    argv = argv_prefix + [binary] + args + (["-J", json_path] if json_ok else [])
    res = run_cmd(argv, timeout=timeout, env=env)
    with open(os.path.join(out_dir, text_name), "w") as fh:
        fh.write(res.stdout)
        if res.stderr:
            fh.write("\n# --- stderr ---\n" + res.stderr)
    art.raw.append(text_name)
    text = parse_text(res.stdout, program=os.path.basename(binary))
    parsed = text
    if os.path.exists(json_path):
        art.raw.append(json_name)
        from_json = parse_json(read_text(json_path) or "", program=os.path.basename(binary))
        # The JSON file carries full precision; the text is the fallback (and tells a hang by its missing footer).
        if from_json["rows"] and (from_json["complete"] or not text["complete"]):
            parsed = dict(from_json, complete=text["complete"] or from_json["complete"])
    ranks = nranks(text) or nranks(parsed)
    nodes = len({d["host"] for d in text["devices"]}) or 1
    for row in parsed["rows"]:
        labels = {"collective": coll, "size_bytes": row["size"], "placement": row["placement"], "nodes": nodes,
                  "ranks": ranks, "dtype": row["type"]}
        art.add("time_us", row["time_us"], "us", **labels)
        art.add("algbw_gbps", row["algbw_gbps"], "GB/s", **labels)
        art.add("busbw_gbps", row["busbw_gbps"], "GB/s", **labels)
        if row["wrong"] is not None:
            art.add("wrong", row["wrong"], "count", **labels)
    if parsed["avg_busbw"] is not None:
        art.add("avg_busbw_gbps", parsed["avg_busbw"], "GB/s", collective=coll, nodes=nodes, ranks=ranks)
    if text["version"]:
        art.facts["nccl_tests_version"] = text["version"]
    if parsed.get("nccl_version"):
        art.facts["nccl_version_code"] = parsed["nccl_version"]
    last = human_bytes(parsed["last_size"]) if parsed["last_size"] else "nothing"
    if res.timed_out:
        return {"kind": "hang", "collective": coll, "log": text_name,
                "message": "hang: %s printed results up to %s and was stopped after %g s" % (
                    os.path.basename(binary), last, timeout)}
    if res.missing or res.rc is None:
        return {"kind": "error", "collective": coll, "log": text_name, "message": res.stderr.strip()[:300]}
    if res.rc != 0 or not text["complete"]:
        errors = text["errors"] + parsed["errors"]
        why = errors[0] if errors else ((res.stderr or res.stdout).strip().splitlines() or ["no output"])[-1]
        if res.rc != 0 and text["complete"] and parsed.get("out_of_bounds"):
            why = "%d tests with wrong results" % parsed["out_of_bounds"]
        return {"kind": "error", "collective": coll, "log": text_name,
                "message": "%s exited %s after %s: %s" % (os.path.basename(binary), res.rc, last, why[:300])}
    return None


def run(art, params, out_dir):
    dev, gpus, gpu_facts = device.describe()
    art.device = dev
    if dev["backend"] not in ("cuda", "rocm") or not gpus:
        art.skip("no GPU visible (backend %s%s): nccl-tests needs NVIDIA or AMD GPUs" % (
            dev["backend"], "; %s" % gpu_facts["gpu_error"] if gpu_facts.get("gpu_error") else ""))
        return
    hosts = list(params["hosts"] or [art.host])
    rank = params["rank"]
    launcher = params["launcher"]
    if launcher == "mpirun" and len(hosts) > 1 and rank != 0:
        art.skip("the multi-node nccl-tests run is launched by mpirun from %s; its results are in that host's artifact"
                 % hosts[0])
        return
    collectives = params["collectives"] or DEFAULT_COLLECTIVES
    dirs = [d for d in [params["bin_dir"], os.environ.get("NCCL_TESTS_DIR")] if d] + SEARCH_DIRS
    base = os.path.splitext(artifact_filename(art.probe, art.variant))[0]
    work = os.path.join(out_dir, ".%s-work" % base)
    binaries = find_binaries(collectives, dirs)
    if not binaries:
        art.skip(not_installed(params, "nccl_tests", "nccl-tests not found (%s_perf in %s or PATH)"
                               % (collectives[0], ", ".join(dirs))))
        return
    art.facts["binaries"] = ", ".join(sorted(binaries.values()))
    missing = [c for c in collectives if c not in binaries]
    if missing:
        art.facts["missing_binaries"] = ", ".join("%s_perf" % c for c in missing)
    ngpus = len(gpus)
    args = ["-b", str(params["min_bytes"]), "-e", str(params["max_bytes"]), "-f", str(params["factor"]), "-c", "1",
            "-w", str(params["warmup"]), "-n", str(params["iters"])]
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in params["env"].items()})
    prefix = []
    if launcher == "mpirun" and len(hosts) > 1:
        mpirun = shutil.which("mpirun")
        if not mpirun:
            art.skip(not_installed(params, "mpi", "launcher mpirun asked for, but mpirun is not installed on %s"
                                   % art.host))
            return
        os.makedirs(work, exist_ok=True)
        hostfile = os.path.join(work, "hostfile")
        with open(hostfile, "w") as fh:
            fh.write("".join("%s slots=%d\n" % (a, ngpus) for a in params["addresses"] or hosts))
        prefix = [mpirun, "-np", str(ngpus * len(hosts)), "--hostfile", hostfile, "--bind-to", "none"]
        if os.geteuid() == 0:
            prefix.append("--allow-run-as-root")
        for key in sorted(k for k in env if k.startswith(("NCCL_", "UCX_", "CUDA_", "LD_LIBRARY_PATH", "PATH"))):
            prefix += ["-x", key]
        args += ["-g", "1"]
    else:
        args += ["-g", str(ngpus)]
    art.facts.update({"launcher": launcher if prefix else "local", "gpus": ngpus,
                      "env": " ".join("%s=%s" % kv for kv in sorted(params["env"].items())) or None})
    timeout = params["timeout_per_collective"]
    failures = []
    try:
        for coll in collectives:
            if coll not in binaries:
                continue
            failure = run_one(art, coll, binaries[coll], prefix, args, env, timeout, base, out_dir,
                              supports_json(binaries[coll]))
            if failure:
                failures.append(dict(failure, nodes=len(hosts) if prefix else 1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    art.facts["failures"] = failures
    if failures:
        art.error("%d of %d nccl-tests runs failed; first: %s (log: %s)" % (
            len(failures), len(binaries), failures[0]["message"], failures[0]["log"]))
