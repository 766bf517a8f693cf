"""storage_soak: filesystem endurance (seed, "Storage" under Phase 3): for each client count, ``phase_s`` seconds
of sequential mixed reads and writes, then ``phase_s`` seconds of random mixed reads and writes, with fio
(probes/burnin/fio.py); the bandwidth of every interval is kept, so degradation over time shows (the first tenth
against the last tenth of each phase), plus IOPS and p99 completion latency per phase, beside the monitor.

Params: directory (default: a directory under the probe's working directory; point it at the filesystem under
test), clients (list of fio job counts), phase_s, size_mib (per job), direct, interval_s, and the start / poll /
stop modes of probes/burnin/runner.py. Skipped with the reason when fio is not installed.
"""

import shutil

from probes.burnin.fio import PHASES
from probes.burnin.runner import run_modes, soak_params
from probes.common.tools import not_installed
from probes.params import Param

PARAMS = soak_params(
    clients=Param(list, [1], "start: fio job counts, one after the other"),
    phases=Param(list, list(PHASES), "start: the I/O phases run for each client count"),
    phase_s=Param(float, 450, "start: seconds per phase"),
    size_mib=Param(int, 256, "start: MiB of file per fio job"),
    directory=Param(str, "", "start: where the files go, on the filesystem under test (default: the probe's "
                             "working directory)"),
    direct=Param(bool, False, "start: O_DIRECT I/O"),
)


def run(art, params, out_dir):
    mode = params["mode"]
    if mode == "start" and not shutil.which("fio"):
        art.skip(not_installed(params, "fio", "fio is not installed on this node"))
        return
    clients = [int(c) for c in (params["clients"] or [1])]
    phases = params["phases"] or list(PHASES)
    unknown = [ph for ph in phases if ph not in PHASES]
    if unknown:
        raise ValueError("unknown phases %s (known: %s)" % (", ".join(unknown), ", ".join(PHASES)))
    phase_s = params["phase_s"]
    spec = {"clients": clients, "phases": phases, "phase_s": phase_s, "size_mib": params["size_mib"],
            "directory": params["directory"] or None, "direct": params["direct"]}
    if mode == "start":
        # fio ends each phase by itself; the deadline is only the backstop (layout and start of every phase).
        planned = len(clients) * len(phases) * phase_s
        params = dict(params, planned_s=planned, duration_s=planned + len(clients) * len(phases) * 15 + 15)
    run_modes(art, params, out_dir, {"fio": spec})
