"""The monitor that runs beside a burn-in or soak: every `interval` seconds one sample of what the node is doing.

* GPUs: one long-running ``nvidia-smi --query-gpu=… -lms`` stream (probes/burnin/smi.py), reduced per interval to one
  sample per GPU (temperature, power, SM and memory clocks, throttle reasons, utilization, ECC counters);
* CPU hosts (and every host): utilisation from /proc/stat, the hottest thermal zone, the mean cpufreq clock,
  the load average, where readable;
* NICs: byte, error and drop counters of every interface under /sys/class/net (not lo), and the carrier changes
  (link down/up) of the physical ones, as deltas;
* RDMA ports: the error counters of every port under /sys/class/infiniband (symbol errors, link downed, link error
  recovery, receive errors, ...), as deltas, and which of them sit at their maximum (they saturate, never wrap);
* GPU memory errors: ECC counters and row-remapping state of every GPU from ``nvidia-smi -q -x`` (the audit's
  parser), read once before the load starts and once after it stopped, so the controller sees what changed;
* kernel log: new /dev/kmsg records since the start, XID / SXID / AER lines parsed (probes/common/kernel_log.py) and
  appended, with their wall time, to the kernel timeline; a read that fails mid-run writes one ``kmsg_error`` record
  (when, the error, and up to when the log was read) to the monitor timeline.

Each sample is one JSON line appended to the monitor file as soon as it is taken, so an interrupted run keeps
everything up to its last interval.
"""

import glob
import json
import os
import shutil
import subprocess
import threading
import time
import xml.etree.ElementTree as ET

from probes.audit.amd import parse_metric, parse_rocm_smi_ras
from probes.audit.nvidia import parse_smi_xml
from probes.burnin import smi as soak_smi
from probes.common import kernel_log as soak_kernel
from probes.common.command import run_cmd
from probes.common.procs import wrapped
from probes.common.readers import read_text

NIC_COUNTERS = ("rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")
# The port error counters under /sys/class/infiniband/<dev>/ports/<n>/counters (the audit reads the same ones) and
# the width of each in the PortCounters attribute they are read from (drivers/infiniband/core/sysfs.c,
# PORT_PMA_ATTR): they stop at all ones and never wrap, so a counter at its maximum cannot count what happens next.
RDMA_COUNTER_MAX = {"symbol_error": 0xFFFF, "link_error_recovery": 0xFF, "link_downed": 0xFF,
                    "port_rcv_errors": 0xFFFF, "port_rcv_remote_physical_errors": 0xFFFF, "port_xmit_discards": 0xFFFF,
                    "local_link_integrity_errors": 0xF, "excessive_buffer_overrun_errors": 0xF}
# What one GPU memory error reading keeps of probes/audit/nvidia.parse_smi_xml (counters, and flags as booleans).
GPU_ERROR_FIELDS = ("ecc_correctable_volatile", "ecc_uncorrectable_volatile", "ecc_uncorrectable_aggregate",
                    "remapped_rows_correctable", "remapped_rows_uncorrectable", "remap_pending", "remap_failure")
# An AMD GPU's (probes/audit/amd.parse_metric of `amd-smi metric --ecc`, parse_rocm_smi_ras of `rocm-smi
# --showrasinfo`): totals since the driver loaded, correctable, uncorrectable and deferred (uncorrectable, poisoned).
AMD_ERROR_FIELDS = ("ecc_correctable_aggregate", "ecc_uncorrectable_aggregate", "ecc_deferred")
# Where an AMD node's ECC totals are read, in order: amd-smi, else rocm-smi (text only: it has no JSON for RAS).
AMD_ERROR_READS = ((["amd-smi", "metric", "--ecc", "--json"], parse_metric),
                   (["rocm-smi", "--showrasinfo"], parse_rocm_smi_ras))
# Kernel lines kept in the kernel timeline besides the classified ones: error level or worse, capped.
MAX_OTHER_ERR_LINES = 200


def append_jsonl(path, records):
    if not records:
        return
    with open(path, "a") as fh:
        for rec in records:
            fh.write(json.dumps(rec, sort_keys=True) + "\n")


def read_jsonl(path):
    out = []
    try:
        with open(path) as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # a line torn by a kill: the rest counts
    except OSError:
        pass
    return out


def cpu_times(text):
    """/proc/stat's first line -> (busy, total) jiffies."""
    for line in (text or "").splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            return sum(values) - idle, sum(values)
    return None


def thermal_max_c(sys_root="/sys"):
    temps = []
    for path in glob.glob(os.path.join(sys_root, "class/thermal/thermal_zone*/temp")):
        text = read_text(path)
        try:
            temps.append(int(text.strip()) / 1000.0)
        except (ValueError, AttributeError):
            continue
    return max(temps) if temps else None


def cpufreq_mean_mhz(sys_root="/sys"):
    freqs = []
    for path in glob.glob(os.path.join(sys_root, "devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq")):
        text = read_text(path)
        try:
            freqs.append(int(text.strip()) / 1000.0)
        except (ValueError, AttributeError):
            continue
    return round(sum(freqs) / len(freqs), 1) if freqs else None


def _read_counters(directory, names):
    values = {}
    for counter in names:
        text = read_text(os.path.join(directory, counter))
        try:
            values[counter] = int(text.strip())
        except (ValueError, AttributeError):
            continue
    return values


def nic_counters(sys_root="/sys"):
    """{interface: {counter: value}} of every interface but lo; carrier_changes only for physical interfaces (a veth
    changes carrier whenever a container starts or stops: no link flap)."""
    out = {}
    for path in glob.glob(os.path.join(sys_root, "class/net/*/statistics")):
        iface = os.path.dirname(path)
        name = os.path.basename(iface)
        if name == "lo":
            continue
        out[name] = _read_counters(path, NIC_COUNTERS)
        if os.path.exists(os.path.join(iface, "device")):
            out[name].update(_read_counters(iface, ("carrier_changes",)))
    return out


def rdma_counters(sys_root="/sys"):
    """{'<device>/<port>': {counter: value}} of every RDMA port's error counters."""
    out = {}
    for path in glob.glob(os.path.join(sys_root, "class/infiniband/*/ports/*/counters")):
        port = os.path.dirname(path)
        dev = os.path.basename(os.path.dirname(os.path.dirname(port)))
        out["%s/%s" % (dev, os.path.basename(port))] = _read_counters(path, RDMA_COUNTER_MAX)
    return out


def deltas(now, prev):
    """{name: {counter: increase}} between two readings; a counter that went down (reset) gives no delta."""
    out = {}
    for name, values in now.items():
        before = prev.get(name) or {}
        out[name] = {k: v - before[k] for k, v in values.items() if k in before and v >= before[k]}
    return out


def gpu_error_reading(when, tool="nvidia-smi", timeout=20.0, source=None):
    """The GPUs' ECC counters and row-remapping state now (`nvidia-smi -q -x`, read by the audit's parser; on AMD
    the ECC totals of amd-smi or rocm-smi), as one timeline record; a failed reading says why."""
    rec = {"type": "gpu_errors", "when": when, "t": round(time.time(), 3)}
    if tool != "nvidia-smi":
        return _amd_error_reading(rec, timeout, source)
    res = run_cmd(["nvidia-smi", "-q", "-x"], timeout=timeout)
    if res.rc != 0:
        text = (res.stderr or res.stdout).strip().splitlines()
        rec["error"] = "nvidia-smi -q -x: %s" % ("timed out after %g s" % timeout if res.timed_out else
                                                text[0][:200] if text else "exit %s" % res.rc)
        return rec
    try:
        gpus = parse_smi_xml(res.stdout)["gpus"]
    except ET.ParseError as exc:
        rec["error"] = "nvidia-smi -q -x: unreadable XML (%s)" % exc
        return rec
    rec["gpus"] = [dict({k: g.get(k) for k in GPU_ERROR_FIELDS}, gpu=g["index"], pci=g.get("pci_bus_id"))
                   for g in gpus]
    return rec


def _amd_error_reading(rec, timeout, source=None):
    why = []
    for argv, parser in AMD_ERROR_READS:
        if source and " ".join(argv) != source:
            continue  # only the tool the start was read with
        res = run_cmd(argv, timeout=timeout)
        if res.missing:
            why.append("%s not found" % argv[0])
            continue
        if res.timed_out or res.rc is None:
            why.append("%s: %s" % (" ".join(argv[:3]), "timed out after %g s" % timeout if res.timed_out else
                                   (res.stderr.strip() or "could not start")[:200]))
            continue
        try:
            per_gpu = parser(res.stdout)  # read whatever the exit code: the tools exit non-zero on one bad field
        except ValueError as exc:
            why.append("%s (exit %s)" % (exc, res.rc))
            continue
        rec["source"] = " ".join(argv)
        rec["gpus"] = [dict({k: g.get(k) for k in AMD_ERROR_FIELDS}, gpu=index, pci=None)
                       for index, g in sorted(per_gpu.items())]
        return rec
    rec["error"] = "; ".join(why)
    return rec


class SmiStream:
    """``nvidia-smi --query-gpu=… -lms`` in the background; take() returns the rows parsed since the last take."""

    def __init__(self, interval_ms, fields=soak_smi.QUERY_FIELDS):
        self.rows = []
        self.seen = 0
        self.lock = threading.Lock()
        self.error = None
        self.interval_ms, self.fields = interval_ms, fields
        argv = ["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits",
                "-lms", str(int(interval_ms))]
        self.proc = subprocess.Popen(wrapped(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for raw in self.proc.stdout:
            row = soak_smi.parse_line(raw.decode("utf-8", "replace"))
            if row is not None:
                with self.lock:
                    self.rows.append(row)
                    self.seen += 1

    def take(self):
        with self.lock:
            rows, self.rows = self.rows, []
        return rows

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class Monitor:
    def __init__(self, cfg, monitor_path, kernel_path):
        self.cfg = cfg
        self.interval = float(cfg.get("interval", 5.0))
        self.monitor_path, self.kernel_path = monitor_path, kernel_path
        self.sys_root = cfg.get("sys_root", "/sys")
        self.smi = None
        self.facts = {}
        # the GPUs' memory error counters are read before the load starts and after it stops
        tool = cfg.get("gpu_tool")
        amd = os.path.exists(cfg.get("kfd_path", "/dev/kfd")) and shutil.which("rocm-smi")  # no amd-smi: "none"
        self.error_tool = tool if tool == "nvidia-smi" and shutil.which("nvidia-smi") else "amd-smi" if (
            tool == "amd-smi" and (shutil.which("amd-smi") or shutil.which("rocm-smi")) or amd) else None
        self.error_source = None
        if self.error_tool:
            start = gpu_error_reading("start", self.error_tool)
            # the end is read by the same tool: amd-smi's totals and rocm-smi's block sums are not the same counts
            self.error_source = start.get("source")
            append_jsonl(self.monitor_path, [start])
        if cfg.get("gpu_tool") == "nvidia-smi" and shutil.which("nvidia-smi"):
            self.smi = SmiStream(int(cfg.get("smi_interval_ms", 1000)))
            self.facts["gpu_telemetry"] = "nvidia-smi -lms %d" % int(cfg.get("smi_interval_ms", 1000))
        else:
            self.facts["gpu_telemetry"] = "none (no nvidia-smi on this node%s)" % (
                "; ECC totals read before and after" if self.error_tool == "amd-smi" else "")
        self.kmsg = soak_kernel.KmsgReader(cfg.get("kmsg_path", "/dev/kmsg"))
        self.facts["kmsg"] = self.kmsg.error or "reading %s from the start of the run" % self.kmsg.path
        self.kmsg_error = self.kmsg.error  # the last failure written to the timeline (the start's is in the facts)
        self.other_err = 0
        self.prev_cpu = cpu_times(read_text("/proc/stat"))
        self.prev_nic = nic_counters(self.sys_root)
        self.prev_rdma = rdma_counters(self.sys_root)
        self.prev_t = time.time()

    def sample(self):
        now = time.time()
        dt = max(1e-6, now - self.prev_t)
        rec = {"type": "monitor", "t": round(now, 3), "dt": round(dt, 3)}
        cpu = cpu_times(read_text("/proc/stat"))
        if cpu and self.prev_cpu and cpu[1] > self.prev_cpu[1]:
            rec["cpu_util_pct"] = round(100.0 * (cpu[0] - self.prev_cpu[0]) / (cpu[1] - self.prev_cpu[1]), 2)
        self.prev_cpu = cpu
        rec["cpu_temp_c"] = thermal_max_c(self.sys_root)
        rec["cpu_mhz"] = cpufreq_mean_mhz(self.sys_root)
        load = (read_text("/proc/loadavg") or "").split()
        rec["load1"] = float(load[0]) if load else None
        nics = nic_counters(self.sys_root)
        rec["nics"] = deltas(nics, self.prev_nic)
        self.prev_nic = nics
        rdma = rdma_counters(self.sys_root)
        rec["rdma"] = deltas(rdma, self.prev_rdma)
        self.prev_rdma = rdma
        saturated = sorted("%s:%s" % (port, k) for port, values in rdma.items() for k, v in values.items()
                           if v >= RDMA_COUNTER_MAX[k])
        if saturated:
            rec["rdma_saturated"] = saturated
        if self.smi is not None:
            if (self.smi.seen == 0 and self.smi.proc.poll() is not None
                    and self.smi.fields == soak_smi.QUERY_FIELDS):
                # nvidia-smi refused the query (an unknown field name on this driver): the newer field name
                self.smi = SmiStream(self.smi.interval_ms, soak_smi.QUERY_FIELDS_NEW)
                self.facts["gpu_telemetry"] += " (clocks_event_reasons)"
            rec["gpus"] = soak_smi.window_sample(self.smi.take(), now)
        events = []
        lines = 0
        for t, krec in self.kmsg.read_new():
            lines += 1
            ev = soak_kernel.event(krec["message"], t, krec["prio"], krec["seq"])
            if ev is None and krec["prio"] <= 3 and self.other_err < MAX_OTHER_ERR_LINES:
                self.other_err += 1
                ev = {"kind": "err", "t": round(t, 3), "line": krec["message"], "prio": krec["prio"],
                      "seq": krec["seq"]}
            if ev is not None:
                events.append(ev)
        rec["kernel_lines"] = lines
        rec["kernel_events"] = len(events)
        append_jsonl(self.kernel_path, events)
        failed = []
        if self.kmsg.error != self.kmsg_error:
            # a read failed mid-run: the log was read in full only up to the last read that worked (the previous
            # sample's); the facts were written at the start, so the timeline carries it (summary: facts.kmsg_error)
            self.kmsg_error = self.kmsg.error
            failed.append({"type": "kmsg_error", "t": round(now, 3), "error": self.kmsg.error,
                           "read_until": round(self.prev_t, 3)})
        append_jsonl(self.monitor_path, failed + [rec])
        self.prev_t = now
        return rec

    def run(self, stop_event):
        next_t = time.time() + self.interval
        while not stop_event.wait(max(0.0, next_t - time.time())):
            self.sample()
            next_t += self.interval
        self.sample()  # the last stretch up to the stop

    def close(self):
        """After the load stopped (the runner closes the monitor before it writes its done file)."""
        if self.smi is not None:
            self.smi.close()
        if self.error_tool:
            append_jsonl(self.monitor_path, [gpu_error_reading("end", self.error_tool, source=self.error_source)])
        self.kmsg.close()
