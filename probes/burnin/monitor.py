"""monitor: the burn-in's monitoring timeline on its own, for ``duration_s`` seconds (GPU telemetry from
nvidia-smi, CPU utilisation, temperature and clocks, NIC counters, kernel log with XID / SXID / AER lines parsed),
with the start / poll / stop modes of probes/burnin/runner.py. burnin, fabric_soak and storage_soak run the same
monitor beside their load, in the same artifact.
"""

from probes.burnin.runner import run_modes, soak_params

PARAMS = soak_params()


def run(art, params, out_dir):
    run_modes(art, params, out_dir, {})
