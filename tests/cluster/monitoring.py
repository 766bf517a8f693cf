#!/usr/bin/env python3
"""Monitoring on the SSH test cluster: Debian's prometheus (2.42) and prometheus-node-exporter (1.5), for real.

Layout (everything under ``<cluster state>/monitoring``, made fresh by every ``up``):

* a node exporter in every host, listening on the host's address (port NODE_PORT), with its textfile collector
  reading ``textfile/<host>/``;
* one Prometheus in the first host (port PROM_PORT), scraping every host's node exporter every ``scrape_interval_s``
  seconds, its data in ``prometheus/``;
* DCGM-shaped series for fake GPUs, written by this harness into each host's textfile directory
  (``write_gpus``): the metric names and labels of NVIDIA's dcgm-exporter (DCGM_FI_DEV_GPU_TEMP{gpu, UUID, device,
  modelName, Hostname} ...), each file headed "# written by the clustermax.assess test harness: not DCGM, not a
  GPU". Tests make one GPU's series go missing (``write_gpus(..., missing=...)``), a node's series go stale (stop
  its exporter: ``stop_exporter``) and an XID appear (``write_gpus(..., xid=...)``).

Daemons are started inside their host's namespaces with their PID written to ``run/``; ``down`` ends them by PID
(checked to be in that host) and removes the directory.

    mon = Monitoring(cluster, scrape_interval_s=1)
    mon.up()                                   # every target up
    mon.write_gpus("cmxa-node2", gpus=2, missing={(1, "DCGM_FI_DEV_POWER_USAGE")})
    mon.url                                     # http://<first host>:9090
    mon.down()
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cluster.cluster import Cluster, ClusterError  # noqa: E402
from cluster.procs import _pid_alive, _terminate, in_host  # noqa: E402

BINARIES = {"prometheus": "/usr/bin/prometheus", "node_exporter": "/usr/bin/prometheus-node-exporter"}
PACKAGES = "prometheus prometheus-node-exporter"
NODE_PORT, PROM_PORT = 9100, 9090
HEADER = "# written by the clustermax.assess test harness: not DCGM, not a GPU\n"
# dcgm-exporter's default counters the monitoring phase looks for (etc/default-counters.csv), with a plausible
# value of an idle GPU each; XID errors are 0 until one is injected.
DCGM_SERIES = {
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", 34), "DCGM_FI_DEV_POWER_USAGE": ("gauge", 71.5),
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", 1980), "DCGM_FI_DEV_XID_ERRORS": ("gauge", 0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", 0), "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": ("counter", 0),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", 0),
}


def preflight() -> str | None:
    missing = [name for name, path in BINARIES.items() if not os.access(path, os.X_OK)]
    if missing:
        return f"monitoring not installed ({', '.join(missing)} missing): apt-get install {PACKAGES}"
    return None


class Monitoring:
    def __init__(self, cluster: Cluster, scrape_interval_s: float = 1.0):
        self.cluster = cluster
        self.scrape_interval_s = scrape_interval_s

    @property
    def dir(self) -> Path:
        return self.cluster.state_dir / "monitoring"

    @property
    def head(self) -> dict:
        return self.cluster.hosts[0]

    @property
    def url(self) -> str:
        return f"http://{self.head['ip']}:{PROM_PORT}"

    def textfile_dir(self, host: str) -> Path:
        return self.dir / "textfile" / host

    # ---- fake GPUs ---------------------------------------------------------------------------------------------

    def write_gpus(self, host: str, gpus: int = 2, missing=(), xid: dict | None = None) -> None:
        """DCGM-shaped series of `gpus` fake GPUs on a host; `missing` {(gpu, metric)} left out, `xid` {gpu: code}."""
        lines = [HEADER]
        for metric, (kind, value) in DCGM_SERIES.items():
            lines.append(f"# HELP {metric} dcgm-exporter's {metric}, written by the test harness\n")
            lines.append(f"# TYPE {metric} {kind}\n")
            for gpu in range(gpus):
                if (gpu, metric) in set(missing):
                    continue
                v = (xid or {}).get(gpu, value) if metric == "DCGM_FI_DEV_XID_ERRORS" else value
                labels = (f'gpu="{gpu}",UUID="GPU-00000000-fake-{host}-{gpu}",device="nvidia{gpu}",'
                          f'modelName="not a GPU (test harness)",Hostname="{host}"')
                lines.append(f"{metric}{{{labels}}} {v}\n")
        path = self.textfile_dir(host) / "dcgm.prom"
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(lines))
        os.replace(tmp, path)  # the collector never reads half a file

    # ---- daemons -----------------------------------------------------------------------------------------------

    def _start(self, host: dict, name: str, argv: list) -> None:
        pidfile = self.dir / "run" / f"{name}-{host['name']}.pid"
        log = self.dir / "log" / f"{name}-{host['name']}.log"
        script = 'echo $$ > "$1"; shift; exec "$@"'
        self.cluster.exec(host["name"], ["sh", "-c", f"setsid sh -c '{script}' sh {pidfile} {' '.join(argv)} "
                                         f"</dev/null >{log} 2>&1 &"], timeout=30, check=True)

    def _pids(self) -> dict:
        out = {}
        for pidfile in (self.dir / "run").glob("*.pid") if (self.dir / "run").exists() else []:
            try:
                out[pidfile.stem] = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        return out

    def start_exporter(self, host: dict) -> None:
        self._start(host, "node_exporter", [BINARIES["node_exporter"], f"--web.listen-address={host['ip']}:{NODE_PORT}",
                                            f"--collector.textfile.directory={self.textfile_dir(host['name'])}"])

    def stop_exporter(self, name: str) -> None:
        pid = self._pids().get(f"node_exporter-{name}")
        if pid:
            _terminate([pid], term_timeout=5.0)

    def prometheus_conf(self) -> str:
        targets = [f"{h['ip']}:{NODE_PORT}" for h in self.cluster.hosts]
        return json.dumps({
            "global": {"scrape_interval": f"{int(self.scrape_interval_s * 1000)}ms", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "node", "static_configs": [{"targets": targets}],
                                "relabel_configs": [{"source_labels": ["__address__"], "regex": f"{h['ip']}:.*",
                                                     "target_label": "node", "replacement": h["name"]}
                                                    for h in self.cluster.hosts]}]}, indent=1)

    def up(self, timeout: float = 60.0, missing: dict | None = None) -> Monitoring:
        """Exporters and Prometheus, every target up; `missing` {host: {(gpu, metric)}}: series that never exist."""
        reason = preflight()
        if reason:
            raise ClusterError(reason)
        self.down()
        for sub in ("run", "log", "prometheus"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        for h in self.cluster.hosts:
            self.textfile_dir(h["name"]).mkdir(parents=True, exist_ok=True)
            self.write_gpus(h["name"], missing=(missing or {}).get(h["name"], ()))
            self.start_exporter(h)
        conf = self.dir / "prometheus.yml"
        conf.write_text(self.prometheus_conf())  # JSON is YAML
        self._start(self.head, "prometheus", [BINARIES["prometheus"], f"--config.file={conf}",
                                              f"--storage.tsdb.path={self.dir / 'prometheus'}",
                                              f"--web.listen-address={self.head['ip']}:{PROM_PORT}"])
        self.wait_targets_up(timeout)
        return self

    def query(self, path: str) -> dict:
        """GET on Prometheus's API from inside the first host (its address is only reachable there)."""
        cp = self.cluster.exec(self.head["name"], [sys.executable, "-c", "import sys, urllib.request; "
                               "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
                               self.url + path], timeout=30)
        if cp.returncode != 0:
            raise ClusterError(f"prometheus {path}: {cp.stderr[-300:]}")
        return json.loads(cp.stdout)

    def wait_targets_up(self, timeout: float = 60.0) -> None:
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                targets = self.query("/api/v1/targets")["data"]["activeTargets"]
                last = {t["labels"].get("node"): t["health"] for t in targets}
                if len(last) == len(self.cluster.hosts) and set(last.values()) == {"up"}:
                    return
            except ClusterError as exc:
                last = str(exc)
            time.sleep(0.5)
        raise ClusterError(f"monitoring: not every target up within {timeout:.0f}s: {last}; logs in {self.dir / 'log'}")

    def down(self) -> None:
        pids = []
        for name, pid in self._pids().items():
            host = next((h for h in self.cluster.hosts if name.endswith("-" + h["name"])), None)
            if host and _pid_alive(pid) and in_host(pid, host):
                pids.append(pid)
        _terminate(pids, term_timeout=5.0)
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="monitoring.py")
    parser.add_argument("--state-dir")
    parser.add_argument("action", choices=["up", "down"])
    args = parser.parse_args()
    mon = Monitoring(Cluster(state_dir=args.state_dir))
    if args.action == "up":
        t0 = time.monotonic()
        mon.up()
        print(f"monitoring up in {time.monotonic() - t0:.1f}s: {mon.url}")
    else:
        mon.down()
