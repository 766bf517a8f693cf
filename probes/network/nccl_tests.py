"""nccl_tests: NVIDIA's nccl-tests (or ROCm's rccl-tests) on 1 node, then 2, 4 … all nodes, text and `-J` JSON parsed.

- Needs GPUs: on a node without them the artifact is skipped with that reason (unless ranks_per_node is set: the
  launch mechanics tested with a stand-in binary, tests/integration/nccl_tests_standin.c).
- Finds the `<collective>_perf` binaries, first found wins (search_dirs): params bin_dir, PATH (the tools step's
  build, roles/tools and probes/tools/tools_build.py: nccl-tests with MPI=1, is put in front of it by
  probes/cli.py use_tools), $NCCL_TESTS_DIR, then the usual places (/opt/nccl-tests/build, …); otherwise skipped
  with where it looked and why the tools step has none.
- 1 node: one process drives every GPU of the node (`-g <gpus>`), on every node at the same time: the single-node
  (NVLink) curve of each node, which per-node outliers are judged on.
- 2, 4 … all nodes (world size doubling, worlds filling an NVLink domain and a rack first: worlds.placement_order):
  the world's first host starts every collective through the cluster's launcher (probes/common/launch.py): srun
  (`--mpi` from `srun --mpi=list`) or mpirun (a hostfile of the world's addresses), one rank per GPU (`-g 1`), as
  nccl-tests built with MPI=1 is run by hand. torchrun and direct cannot start an MPI program: the multi-node
  steps are then skipped with that reason. The results are in the first host's artifact, labelled with the
  world's node count; `placement` says which hosts (racks, NVLink domains) each world used. An output that is not
  one run of one world (each process printed its own rank 0 or its own table: nccl-tests built without MPI=1,
  started by srun or mpirun) is a failure, and its numbers are not filed as that world's (not_one_world).

Every run has a timeout; a run that is stopped at its timeout is reported as a hang after the last size it printed
(under srun its job is cancelled). Results per (collective, size, placement, nodes): time_us, algbw_gbps,
busbw_gbps, wrong (#wrong), as nccl-tests printed them. The raw stdout and JSON of each binary are kept beside the
artifact.
"""

import os
import shutil

from probes.artifact import artifact_filename
from probes.common import device, launch
from probes.common.command import run_cmd
from probes.common.ports import port_param
from probes.common.readers import read_text
from probes.common.rendezvous import Mesh, StoreError
from probes.common.tools import not_installed
from probes.common.worlds import placement, placement_order, world_size_plan
from probes.network.nccl_output import failing_processes, not_one_world, nranks, parse_json, parse_text
from probes.network.plan import RECORDED_PARAMS, human_bytes
from probes.params import SIZE, Param, Params

# which tests and which library measured, from the header lines nccl-tests and rccl-tests print (the JSON file has
# only the library's version code): fact <- parse_text key
HEADER_FACTS = (("nccl_tests_version", "version"), ("tests_suite", "tests"), ("nccl_headers_code", "nccl_headers"),
                ("library", "library"), ("library_version", "library_version"), ("library_path", "library_path"),
                ("hip_version", "hip_version"), ("rocm_version", "rocm_version"))
DEFAULT_COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"]
# Preinstalled copies, looked at after PATH: an image's copy may be an older build, or one without MPI=1 (which
# runs every process started by srun or mpirun as a world of its own).
SEARCH_DIRS = ["/opt/nccl-tests/build", "/usr/local/nccl-tests/build", "/opt/rccl-tests/build",
               os.path.expanduser("~/nccl-tests/build"), "/usr/local/bin", "/usr/bin"]
PARAMS = Params(
    peers=True,
    collectives=Param(list, DEFAULT_COLLECTIVES, "collectives to run (<collective>_perf binaries)"),
    bin_dir=Param(str, "", "where the nccl-tests binaries are (default: PATH, $NCCL_TESTS_DIR, the usual places)"),
    world_sizes=Param(list, None, "node counts to run (default: 1, then doubling up to all hosts)"),
    ranks_per_node=Param(int, 0, "ranks per node of the multi-node runs (0: one per GPU); on a node without GPUs the "
                                 "probe runs only when this is set (a stand-in binary, for tests of the launch)"),
    min_bytes=Param(SIZE, 8, "smallest message (-b)"),
    max_bytes=Param(SIZE, "1G", "largest message (-e)"),
    factor=Param(int, 2, "each message size is the previous one times this (-f)"),
    warmup=Param(int, 5, "warm-up iterations (-w)"),
    iters=Param(int, 20, "timed iterations (-n)"),
    timeout_per_collective=Param(float, 600, "seconds one collective's run may take"),
    rdzv_timeout=Param(float, 120, "seconds to wait for every host between world sizes (plus the runs' time)"),
    port=Param(int, 0, "port of the run's store on the first host (0: derived from the run id and variant)"),
    env=Param(dict, {}, "environment of the runs (NCCL_*)"),
    **RECORDED_PARAMS,
)


def search_dirs(bin_dir, environ=None):
    """Where `<collective>_perf` is looked for, in order: the bin_dir param (asked for by name), PATH, $NCCL_TESTS_DIR,
    SEARCH_DIRS. PATH comes before the preinstalled copies because the tools step's MPI=1 build is put at its front
    (probes/cli.py use_tools): that build, made for this run, must win over a stale copy in /opt or ~."""
    environ = os.environ if environ is None else environ
    path = [d for d in environ.get("PATH", "").split(os.pathsep) if d]
    return [d for d in [bin_dir] if d] + path + [d for d in [environ.get("NCCL_TESTS_DIR")] if d] + SEARCH_DIRS


def find_binaries(collectives, dirs):
    """collective -> path of `<collective>_perf` in the first directory (of search_dirs) that has it."""
    found = {}
    for coll in collectives:
        name = "%s_perf" % coll
        for d in dirs:
            path = os.path.join(d, name)
            if d and os.path.isfile(path) and os.access(path, os.X_OK):
                found[coll] = path
                break
    return found


def supports_json(binary):
    res = run_cmd([binary, "-h"], timeout=20)
    return "-J" in (res.stdout + res.stderr)


def run_one(art, coll, binary, runner, args, timeout, base, out_dir, json_ok, nodes, world_ranks=None):
    """Run one binary (runner: argv, timeout -> CmdResult); adds its results and returns a failure dict or None.
    world_ranks: the ranks a multi-node run was started with (ranks per node × nodes), when known: an output that
    printed another count is not this world's measurement."""
    suffix = "" if nodes == 1 else ".n%d" % nodes
    json_name = "%s.%s%s.json" % (base, coll, suffix)
    text_name = "%s.%s%s.txt" % (base, coll, suffix)
    json_path = os.path.join(out_dir, json_name)
    if os.path.exists(json_path):
        os.unlink(json_path)
    argv = [binary] + args + (["-J", json_path] if json_ok else [])
    res = runner(argv, timeout)
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
            if not from_json["complete"]:
                # after a hang both are cut short, not always at the same size (nccl-tests writes the JSON file
                # less often than stdout): the text's rows past the JSON's are results too
                seen = {(r["size"], r["placement"]) for r in from_json["rows"]}
                extra = [r for r in text["rows"] if (r["size"], r["placement"]) not in seen]
                if extra:
                    parsed["rows"] = from_json["rows"] + extra
                    parsed["last_size"] = max(parsed["last_size"] or 0, text["last_size"] or 0)
    program = os.path.basename(binary)
    why = not_one_world(text, world_ranks)
    if why:
        # each process measured a world of its own (its own node): filing those rows as this world's would pass a
        # "multi-node" run that never crossed the network
        return {"kind": "error", "collective": coll, "log": text_name,
                "message": "%s at %d node%s is not one measurement of the world: %s; nothing filed (nccl-tests built "
                           "without MPI=1 runs every process that srun or mpirun starts as its own world)" % (
                               program, nodes, "s" if nodes > 1 else "", why)}
    ranks = nranks(text) or nranks(parsed)
    printed_hosts = len({d["host"] for d in text["devices"]})
    if printed_hosts and printed_hosts != nodes:
        art.facts.setdefault("host_count_mismatch", []).append(
            "%s at %d nodes: nccl-tests printed ranks on %d hosts" % (coll, nodes, printed_hosts))
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
    if (parsed["rows"] and all(row["wrong"] is None for row in parsed["rows"]) and parsed.get("out_of_bounds")
            is not None and (parsed.get("params") or {}).get("validation") != 0):
        # older nccl-tests print no #wrong per row (their "error" column is a deviation): their footer's count of
        # out-of-bounds values is the wrong results of the whole run
        art.add("wrong", parsed["out_of_bounds"], "count", collective=coll, nodes=nodes, ranks=ranks,
                source="footer")
    for fact, key in HEADER_FACTS:
        if text.get(key) is not None:
            art.facts[fact] = text[key]
    if parsed.get("nccl_version"):
        art.facts["nccl_version_code"] = parsed["nccl_version"]
    last = human_bytes(parsed["last_size"]) if parsed["last_size"] else "nothing"
    # the processes the output names in its NCCL WARN and Test failure lines (host, pid, device, rank), as printed:
    # in a multi-node world the host that broke is often not this one, the launching host
    named = {"named": failing_processes(res.stdout + "\n" + (res.stderr or ""))}
    if not named["named"]:
        named = {}
    if res.timed_out:
        return dict({"kind": "hang", "collective": coll, "log": text_name,
                     "message": "hang: %s printed results up to %s and was stopped after %g s" % (
                         os.path.basename(binary), last, timeout)}, **named)
    if res.missing or res.rc is None:
        return {"kind": "error", "collective": coll, "log": text_name, "message": res.stderr.strip()[:300]}
    if res.rc != 0 or not text["complete"]:
        errors = text["errors"] + parsed["errors"]
        why = errors[0] if errors else ((res.stderr or res.stdout).strip().splitlines() or ["no output"])[-1]
        if res.rc != 0 and text["complete"] and parsed.get("out_of_bounds"):
            why = "%d tests with wrong results" % parsed["out_of_bounds"]
        return dict({"kind": "error", "collective": coll, "log": text_name,
                     "message": "%s exited %s after %s: %s" % (os.path.basename(binary), res.rc, last, why[:300])},
                    **named)
    if parsed is text and text["unread"]:
        # a result line this parser cannot read is reported, never guessed at (its numbers are not filed)
        return {"kind": "error", "collective": coll, "log": text_name,
                "message": "%s: cannot read %r%s" % (program, text["unread"][0], " (and %d more result lines)" % (
                    len(text["unread"]) - 1) if len(text["unread"]) > 1 else "")}
    return None


def launched_runner(launcher, world, ppn, env, extra, work, log_base, out_dir, job_name, mpirun, launches):
    """runner for one multi-node world: every binary started by srun or mpirun from this host, one rank per GPU;
    each command line (and mpirun's hostfile) is appended to launches, for the artifact."""
    ucx = launch.ucx_wanted(launcher, mpirun)

    def runner(argv, timeout):
        coll = os.path.basename(argv[0])
        name = coll[:-len("_perf")] if coll.endswith("_perf") else coll
        prefix, hostfile = launch.mpi_world_prefix(launcher, world, ppn, env, extra, work, "%s-%s" % (job_name, coll),
                                                   mpirun, timeout, gpus_per_task=1 if world[0]["gpus"] else 0,
                                                   ucx=ucx)
        launches.append({"nodes": len(world), "collective": name, "argv": " ".join(prefix + argv),
                         "hostfile": hostfile})
        return launch.run_launched(launcher, prefix + argv, env,
                                   os.path.join(out_dir, "%s.%s.launcher.log" % (log_base, coll)),
                                   "%s-%s" % (job_name, coll), timeout)
    return runner


def run(art, params, out_dir):
    dev, gpus, gpu_facts = device.describe()
    art.device = dev
    gpu = dev["backend"] in ("cuda", "rocm") and bool(gpus)
    if not gpu and not params["ranks_per_node"]:
        art.skip("no GPU visible (backend %s%s): nccl-tests needs NVIDIA or AMD GPUs" % (
            dev["backend"], "; %s" % gpu_facts["gpu_error"] if gpu_facts.get("gpu_error") else ""))
        return
    hosts = list(params["hosts"] or [art.host])
    addresses = [str(a) for a in (params["addresses"] or hosts)]
    rank, n = params["rank"], len(hosts)
    collectives = params["collectives"] or DEFAULT_COLLECTIVES
    dirs = search_dirs(params["bin_dir"])
    base = os.path.splitext(artifact_filename(art.probe, art.variant))[0]
    work = os.path.join(out_dir, ".%s-work" % base)
    binaries = find_binaries(collectives, dirs)
    if not binaries:
        looked = [d for d in [params["bin_dir"]] if d] + ["PATH", "$NCCL_TESTS_DIR"] + SEARCH_DIRS
        art.skip(not_installed(params, "nccl_tests", "nccl-tests not found (%s_perf in %s)" % (
            collectives[0], ", ".join(looked))))
        return
    art.facts["binaries"] = ", ".join(sorted(binaries.values()))
    missing = [c for c in collectives if c not in binaries]
    if missing:
        art.facts["missing_binaries"] = ", ".join("%s_perf" % c for c in missing)
    ngpus = len(gpus) if gpu else 0
    ppn = params["ranks_per_node"] or ngpus
    args = ["-b", str(params["min_bytes"]), "-e", str(params["max_bytes"]), "-f", str(params["factor"]), "-c", "1",
            "-w", str(params["warmup"]), "-n", str(params["iters"])]
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in params["env"].items()})
    plan = world_size_plan(n, params["world_sizes"])
    order = placement_order(n, params["racks"], params["nvlink_domains"])
    racks, domains = list(params["racks"] or []), list(params["nvlink_domains"] or [])
    art.facts.update({"gpus": ngpus, "ranks_per_node": ppn, "world_sizes": ",".join(map(str, plan)),
                      "env": " ".join("%s=%s" % kv for kv in sorted(params["env"].items())) or None,
                      "placement": [placement(hosts, order[:w] if w > 1 else [rank], racks, domains)
                                    for w in plan]})
    timeout = params["timeout_per_collective"]
    json_ok = {c: supports_json(b) for c, b in binaries.items()}
    failures = []
    mesh = None
    port = port_param(params, "port", art.run_id, "nccl_tests/%s" % (art.variant or ""))
    barrier_s = params["rdzv_timeout"] + timeout * len(binaries) + 120
    os.makedirs(work, exist_ok=True)
    try:
        if n > 1 and any(w > 1 for w in plan):
            mesh = Mesh(hosts, addresses, rank, port, "%s:%s:%d" % (art.run_id, art.variant or "", port),
                        connect_timeout=params["rdzv_timeout"])
            launcher, why_not, facts = launch.agree(mesh, params["launcher"], work, params["mpirun_args"],
                                                    params["rdzv_timeout"], needs_torch=False,
                                                    extra_facts={"gpus": ngpus})
            art.facts.update({"launcher": launcher, "launcher_asked": params["launcher"],
                              "launcher_why_not": why_not or None})
        else:
            facts, launcher = [], "local"
            art.facts["launcher"] = "local"
        for index, w in enumerate(plan):
            members = order[:w]
            if w == 1:
                runner = lambda argv, t: run_cmd(argv, timeout=t, env=env)  # noqa: E731
                for coll in collectives:
                    if coll in binaries:
                        failure = run_one(art, coll, binaries[coll], runner, args + ["-g", str(ngpus or 1)],
                                          timeout, base, out_dir, json_ok[coll], 1)
                        if failure:
                            failures.append(dict(failure, nodes=1))
            elif rank == members[0]:
                why = None
                if launcher not in ("srun", "mpirun"):
                    why = ("nccl-tests starts across nodes only through MPI (srun or mpirun); the launcher is %s%s"
                           % (launcher, "" if launcher != "direct" and not why_not else
                              " (%s)" % "; ".join("%s: %s" % kv for kv in sorted(why_not.items()))))
                elif launcher in why_not:
                    why = "launcher %s cannot be used: %s" % (launcher, why_not[launcher])
                if why:
                    failures.append({"kind": "skipped", "nodes": w, "collective": None, "log": None,
                                     "message": "not run at %d nodes: %s" % (w, why)})
                else:
                    world = [{"slurm": facts[m]["slurm"], "address": addresses[m], "gpus": facts[m]["gpus"]}
                             for m in members]
                    runner = launched_runner(launcher, world, ppn, env,
                                             params["srun_args"] if launcher == "srun" else params["mpirun_args"],
                                             work, "%s.n%d" % (base, w), out_dir,
                                             "cmxa-%s-n%d" % (art.run_id[-12:], w), facts[rank]["mpirun"],
                                             art.facts.setdefault("launches", []))
                    for coll in collectives:
                        if coll in binaries:
                            failure = run_one(art, coll, binaries[coll], runner, args + ["-g", "1"], timeout, base,
                                              out_dir, json_ok[coll], w, world_ranks=ppn * w)
                            if failure:
                                failures.append(dict(failure, nodes=w))
                    for name in sorted(os.listdir(out_dir)):
                        if name.startswith("%s.n%d." % (base, w)) and name.endswith(".launcher.log"):
                            art.raw.append(name)
            if mesh is not None and w > 1:
                try:
                    missing_hosts = mesh.barrier("after-%d" % index, barrier_s)
                except StoreError as exc:
                    missing_hosts = [str(exc)]
                if missing_hosts:
                    art.facts.setdefault("store_errors", []).append(
                        "after %d nodes: %s did not arrive" % (w, ", ".join(missing_hosts)))
    finally:
        if mesh is not None:
            mesh.close()
        shutil.rmtree(work, ignore_errors=True)
    art.facts["failures"] = failures
    real = [f for f in failures if f["kind"] != "skipped"]
    if real:
        art.error("%d nccl-tests runs failed; first: %s (log: %s)" % (
            len(real), real[0]["message"], real[0]["log"]))
