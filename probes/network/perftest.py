"""perftest: RDMA bandwidth per rail with ib_write_bw and ib_read_bw, from host memory and, where perftest was
built with CUDA, from GPU memory (GPUDirect RDMA).

Every node runs this probe at the same time. Rails are the RDMA devices in /sys/class/infiniband (params `hcas`
narrows them). Node i is the client of node i+1 (the last of the first; one node alone tests its own loopback),
rail k to rail k, all rails at once, one test at a time for all nodes: each node serves on port + k for its
predecessor while it measures its successor. GID index (`-x`, RoCE) from params `gid_index`.

No RDMA device, or perftest not installed: the artifact is skipped with that reason. Every server and client has
a timeout, and every process the probe started is stopped at the end.
GPU memory tests (--use_cuda) use, for each rail, the GPU closest to its NIC in `nvidia-smi topo -m` (PIX before
PXB, PHB, NODE, SYS: probes/common/gpu_topo.py); where the matrix cannot be had, rail k uses GPU k mod GPUs, and
the artifact's `gpu_per_rail` says which rule was used and why.
Results: bw_avg_gbits and bw_peak_gbits per (hca, test write|read|send, mem host|gpu, peer), whatever unit the
perftest build prints (probes/network/perftest_output.py); with the latency tests in `tests` (write_lat, read_lat,
send_lat: ib_write_lat, ib_read_lat, ib_send_lat, run per rail like the bandwidth tests) lat_typical_us,
lat_avg_us, lat_p99_us, lat_p99_9_us, lat_min_us and lat_max_us per the same labels.
"""

import os
import shutil
import subprocess
import time

from probes.common import device, gpu_topo
from probes.common.command import run_cmd
from probes.common.netif import resolve
from probes.common.ports import BLOCK, port_param
from probes.common.procs import Children
from probes.common.rendezvous import Mesh
from probes.common.tools import not_installed
from probes.network.perftest_output import parse_bw, parse_lat
from probes.network.plan import RECORDED_PARAMS
from probes.params import Param, Params

SYSFS = "/sys/class/infiniband"
TOOLS = {"write": "ib_write_bw", "read": "ib_read_bw", "send": "ib_send_bw", "write_lat": "ib_write_lat",
         "read_lat": "ib_read_lat", "send_lat": "ib_send_lat"}
# latency results: metric <- parse_lat's row key (microseconds)
LAT_METRICS = (("lat_typical_us", "t_typical_us"), ("lat_avg_us", "t_avg_us"), ("lat_p99_us", "p99_us"),
               ("lat_p99_9_us", "p99_9_us"), ("lat_min_us", "t_min_us"), ("lat_max_us", "t_max_us"))
PARAMS = Params(
    peers=True,
    port=Param(int, 0, "first port of the run's block on every host: the rendezvous, then one a rail (0: derived "
                       "from the run id)"),
    token=Param(str, "", "shared secret of the rendezvous (default: the run id)"),
    hcas=Param(list, [], "RDMA devices to measure (empty: all in /sys/class/infiniband)"),
    tests=Param(list, ["write", "read"], "perftest tests: write (ib_write_bw), read (ib_read_bw), send (ib_send_bw), "
                                         "write_lat, read_lat, send_lat (ib_write_lat, ib_read_lat, ib_send_lat)"),
    gid_index=Param(str, "", "GID index (-x, RoCE; empty: perftest's choice)"),
    message_bytes=Param(int, 65536, "message size of the bandwidth tests (-s)"),
    latency_message_bytes=Param(int, 2, "message size of the latency tests (-s; perftest's own default, 2 bytes, "
                                        "what ib_*_lat run by hand measures)"),
    duration_s=Param(int, 0, "seconds per test (-D; 0: perftest's iteration count)"),
    timeout_per_test=Param(float, 60, "seconds one test may take"),
    gpu_memory=Param(bool, True, "also measure from GPU memory where perftest has --use_cuda"),
    **RECORDED_PARAMS,
)


def rdma_devices(root=None):
    try:
        return sorted(os.listdir(root or SYSFS))
    except OSError:
        return []


def cuda_capable(tool):
    """Whether this perftest build has --use_cuda (it is a build option)."""
    res = run_cmd([tool, "--help"], timeout=10)
    return "use_cuda" in res.stdout + res.stderr


def is_latency(test):
    return test.endswith("_lat")


def common_args(hca, port, params, test="write"):
    size = params["latency_message_bytes"] if is_latency(test) else params["message_bytes"]
    args = ["-d", hca, "-p", str(port), "-F", "-s", str(size)]
    if not is_latency(test):
        args.insert(5, "--report_gbits")
    if params["duration_s"]:
        args += ["-D", str(params["duration_s"])]
    if params["gid_index"]:
        args += ["-x", str(params["gid_index"])]
    return args


def gpu_per_rail(art, hcas, ngpus, out_dir):
    """{hca: GPU index} for --use_cuda, recorded in art.facts["gpu_per_rail"] with the rule that chose it."""
    topo, text = gpu_topo.read()
    if text:
        with open(os.path.join(out_dir, "perftest.nvidia-smi-topo-m.txt"), "w") as fh:
            fh.write(text)
        art.raw.append("perftest.nvidia-smi-topo-m.txt")
    picked, why = (None, topo["error"]) if topo["error"] else gpu_topo.pick_gpus(topo, hcas)
    if picked and max(p["gpu"] for p in picked.values()) >= ngpus:
        picked, why = None, "%s names GPUs this probe does not see (%d found)" % (gpu_topo.TOOL, ngpus)
    if picked:
        art.facts["gpu_per_rail"] = {"rule": "nearest GPU (%s)" % gpu_topo.TOOL, "why": None, "rails": picked}
        return {hca: p["gpu"] for hca, p in picked.items()}
    choice = {hca: k % ngpus for k, hca in enumerate(hcas)}
    art.facts["gpu_per_rail"] = {"rule": "rail k uses GPU k mod %d" % ngpus, "why": why,
                                 "rails": {hca: {"gpu": g, "link": None} for hca, g in choice.items()}}
    return choice


def run(art, params, out_dir):
    hcas = [h for h in rdma_devices() if not params["hcas"] or h in params["hcas"]]
    if not hcas:
        art.skip("no RDMA devices: %s is missing or empty" % SYSFS if not rdma_devices()
                 else "none of the RDMA devices %s is in hcas %s" % (rdma_devices(), params["hcas"]))
        return
    unknown = [t for t in params["tests"] or [] if t not in TOOLS]
    if unknown:
        art.error("unknown perftest tests %s (known: %s)" % (unknown, ", ".join(TOOLS)))
        return
    missing = [TOOLS[t] for t in params["tests"] or ["write", "read"] if shutil.which(TOOLS[t]) is None]
    if missing:
        art.skip(not_installed(params, "perftest", "perftest is not installed (%s not found)" % ", ".join(missing)))
        return
    dev, gpus, _ = device.describe()
    art.device = dev
    hosts = list(params["hosts"] or [art.host])
    addresses = [str(a) for a in (params["addresses"] or hosts)]
    rank, n = params["rank"], len(hosts)
    peer = (rank + 1) % n
    port = port_param(params, "port", art.run_id, "perftest", span=BLOCK)  # the store, then one a rail
    timeout = params["timeout_per_test"]
    mems = ["host"]
    if gpus and params["gpu_memory"] and cuda_capable(TOOLS["write"]):
        mems.append("gpu")
    art.facts.update({"hcas": ", ".join(hcas), "peer": hosts[peer], "memories": ", ".join(mems),
                      "gid_index": params["gid_index"]})
    gpu_of = gpu_per_rail(art, hcas, len(gpus), out_dir) if "gpu" in mems else {}
    token = "%s:perftest:%d" % (params["token"] or art.run_id, port)
    failures = []
    mesh = None
    try:
        mesh = Mesh(hosts, addresses, rank, port, token) if n > 1 else None
        for test in params["tests"] or ["write", "read"]:
            for mem in mems:
                failures += one_round(art, test, mem, hcas, gpu_of, hosts, addresses, rank, peer, port, timeout,
                                      params, out_dir, mesh)
    finally:
        if mesh:
            mesh.close()
    art.facts["failures"] = failures
    if failures:
        art.error("%d perftest runs failed; first: %s" % (len(failures), failures[0]["message"]))


def one_round(art, test, mem, hcas, gpu_of, hosts, addresses, rank, peer, port, timeout, params, out_dir, mesh):
    tool = shutil.which(TOOLS[test])
    failures = []
    # --use_cuda takes a CUDA ordinal; with PCI bus order CUDA numbers the GPUs as nvidia-smi (and topo -m) does
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID") if mem == "gpu" else None
    with Children() as children:
        servers = []
        for k, hca in enumerate(hcas):
            args = common_args(hca, port + 1 + k, params, test)
            if mem == "gpu":
                args.append("--use_cuda=%d" % gpu_of[hca])
            log = os.path.join(out_dir, "perftest.%s.%s.%s.server.log" % (test, mem, hca))
            servers.append(children.start([tool] + args, env=env, log_path=log))
        time.sleep(0.5)
        if mesh and mesh.barrier("serve-%s-%s" % (test, mem), timeout):
            return [{"kind": "error", "message": "%s %s: not every host started its servers" % (test, mem)}]
        clients = []
        target = resolve(addresses[peer]) or addresses[peer]
        for k, hca in enumerate(hcas):
            args = common_args(hca, port + 1 + k, params, test) + [target]
            if mem == "gpu":
                args.append("--use_cuda=%d" % gpu_of[hca])
            clients.append((hca, children.start([tool] + args, env=env, stdout=subprocess.PIPE)))
        deadline = time.monotonic() + timeout
        for hca, proc in clients:
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
                text = out.decode("utf-8", "replace")
            except subprocess.TimeoutExpired:
                children.stop(proc)
                text = ""
                failures.append({"kind": "hang", "hca": hca, "message": "%s %s on %s to %s: no result within %g s"
                                 % (TOOLS[test], mem, hca, hosts[peer], timeout)})
                continue
            name = "perftest.%s.%s.%s.txt" % (test, mem, hca)
            with open(os.path.join(out_dir, name), "w") as fh:
                fh.write(text)
            art.raw.append(name)
            parsed = parse_lat(text) if is_latency(test) else parse_bw(text)
            if not parsed["rows"]:
                failures.append({"kind": "error", "hca": hca, "log": name, "message": "%s %s on %s to %s: %s" % (
                    TOOLS[test], mem, hca, hosts[peer], parsed["error"] or "no result (rc %s)" % proc.returncode)})
                continue
            row = parsed["rows"][-1]
            labels = {"hca": hca, "test": test, "mem": mem, "peer": hosts[peer], "bytes": row["bytes"],
                      "link_type": parsed["link_type"]}
            if is_latency(test):
                for metric, key in LAT_METRICS:
                    if row.get(key) is not None:
                        art.add(metric, row[key], "us", **labels)
                continue
            art.add("bw_avg_gbits", row["bw_avg_gbits"], "Gbit/s", **labels)
            if row["bw_peak_gbits"] is not None:
                art.add("bw_peak_gbits", row["bw_peak_gbits"], "Gbit/s", **labels)
        for proc in servers:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                children.stop(proc)
    if mesh:
        mesh.barrier("done-%s-%s" % (test, mem), timeout + 30)
    return failures
