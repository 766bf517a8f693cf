"""The storage soak's fio side: one job per phase and client count, and fio's periodic JSON status turned into
per-interval bandwidth.

Phases (the seed's endurance run): ``seq_mixed`` = 1 MiB sequential reads and writes mixed 50/50 (rw=rw),
``rand_mixed`` = random reads and writes mixed 50/50 (rw=randrw, 4 KiB buffered or 64 KiB direct, the block sizes
of the fio sweep). Clients are fio jobs (numjobs) on this node, reported as one group.

``fio --output-format=json --status-interval=N`` prints a cumulative JSON document every N seconds and a last
one at the end; the difference between two documents is the I/O of that interval. The last document's
statistics (bandwidth, IOPS, completion-latency percentiles) are read with probes/storage/fio.py.
"""

import json

from probes.storage.fio import NO_BW, _duration, _side, side_io_bytes

PHASES = {"seq_mixed": ("rw", "1m", "64k"), "rand_mixed": ("randrw", "4k", "64k")}


def job_text(phase, directory, clients, spec):
    rw, bs_buffered, bs_direct = PHASES[phase]
    direct = 1 if spec.get("direct") else 0
    lines = [
        "[global]",
        "directory=%s" % directory,
        "filename_format=cmxa-soak.$jobnum",
        "size=%dm" % int(spec.get("size_mib", 64)),
        "numjobs=%d" % int(clients),
        "group_reporting=1",
        "time_based=1",
        "runtime=%s" % _duration(spec["phase_s"]),
        "randrepeat=0",
        "",
        "[%s]" % phase,
        "rw=%s" % rw,
        "rwmixread=%d" % int(spec.get("rwmixread", 50)),
        "bs=%s" % (bs_direct if direct and rw == "randrw" else bs_buffered),
        "direct=%d" % direct,
        "ioengine=%s" % ("libaio" if direct else "psync"),
        "iodepth=%d" % (16 if direct else 1),
    ]
    return "\n".join(lines) + "\n"


class StatusStream:
    """Feed fio's stdout as it comes; get one record per status document (the interval since the previous one)."""

    def __init__(self, phase, clients, interval):
        self.phase, self.clients, self.interval = phase, clients, interval
        self.buf = ""
        self.prev = None
        self.last_doc = None
        self.untimed = None
        self.decoder = json.JSONDecoder()

    def _docs(self):
        while True:
            start = self.buf.find("{")
            if start < 0:
                self.buf = ""
                return
            try:
                doc, end = self.decoder.raw_decode(self.buf[start:])
            except ValueError:
                self.buf = self.buf[start:]
                return  # incomplete: wait for more
            self.buf = self.buf[start + end:]
            if isinstance(doc, dict) and doc.get("jobs"):
                yield doc

    def feed(self, text):
        self.buf += text
        out = []
        for doc in self._docs():
            self.last_doc = doc
            if "timestamp_ms" not in doc:
                # fio 2.x: its status documents say nothing of when they were written, so no interval has a rate
                self.untimed = doc.get("fio version") or "fio (no version)"
                continue
            job = doc["jobs"][0]
            cur = (float(doc["timestamp_ms"]) / 1000.0, side_io_bytes(job["read"]),
                   side_io_bytes(job["write"]), int(job["read"].get("total_ios", 0)),
                   int(job["write"].get("total_ios", 0)))
            had_status = self.prev is not None
            prev = self.prev or (cur[0] - _elapsed_ms(job, self.clients) / 1000.0, 0, 0, 0, 0)
            self.prev = cur
            dt = cur[0] - prev[0]
            if dt <= 0.05:
                continue  # the final document right after the last status one: nothing new to plot
            if had_status and dt < 0.5 * max(1, int(self.interval)):
                # fio's final document after its last status one: a partial interval (the job winding down), whose
                # rate would weigh as much as a whole interval in the last tenth and read as degradation; its I/O
                # is still in the phase's totals (finish)
                continue
            out.append({"type": "fio", "t": round(cur[0], 3), "t_start": round(prev[0], 3), "phase": self.phase,
                        "clients": self.clients,
                        "read_mibps": round((cur[1] - prev[1]) / dt / 2 ** 20, 3),
                        "write_mibps": round((cur[2] - prev[2]) / dt / 2 ** 20, 3),
                        "read_iops": round((cur[3] - prev[3]) / dt, 1),
                        "write_iops": round((cur[4] - prev[4]) / dt, 1)})
        return out

    def finish(self, rc):
        """The phase's totals from the last document (or why there are none)."""
        if self.last_doc is None:
            return [{"type": "fio_phase", "phase": self.phase, "clients": self.clients, "error": "fio exit %s "
                     "without a JSON status" % rc}]
        job = self.last_doc["jobs"][0]
        rec = {"type": "fio_phase", "phase": self.phase, "clients": self.clients, "rc": rc,
               "fio_error": int(job.get("error", 0) or 0)}
        missing = []
        for side in ("read", "write"):
            s = _side(job.get(side) or {})
            if "bw_bytes" not in s:
                missing.append(side)
                continue
            rec["%s_mibps" % side] = round(s["bw_bytes"] / 2 ** 20, 3)
            rec["%s_iops" % side] = round(s["iops"], 1)
            if "clat_p99_us" in s:
                rec["%s_clat_p99_us" % side] = round(s["clat_p99_us"], 1)
        if missing:
            # no MiB/s rather than 0: the phase counts as an error (summary's fio_errors), not as a stalled device
            rec["error"] = "fio %s: no %s bandwidth: %s" % (self.last_doc.get("fio version", "(no version)"),
                                                           " or ".join(missing), NO_BW)
        elif self.untimed:
            rec["error"] = ("%s: its status documents have no timestamp_ms, so the phase's intervals have no rate "
                            "(the soak's timeline needs fio 3.0 or later)" % self.untimed)
        return [rec]


def _elapsed_ms(job, clients):
    """How long the job had run when fio wrote this document (ms): job_runtime is summed over the group's jobs (one
    per client); fio 3.7 and 3.1 have no job_runtime (3.16 has), where the read and write runtimes (each the longest
    job's) say it. Without either the first interval has no start and is not recorded."""
    if "job_runtime" in job:
        return float(job["job_runtime"]) / max(1, clients)
    return float(max(int((job.get(side) or {}).get("runtime", 0)) for side in ("read", "write")))
