"""Grading of the monitoring phase: the Prometheus half (reports/phases/monitoring/prometheus.py, probe prometheus)
and the Grafana half (reports/phases/monitoring/grafana.py, probe grafana). Both probes run once, from one host, so
every kind is a cluster kind with its rows on that host (reports/grading/one_host.py)."""

from reports.phases.monitoring import grafana, prometheus

PER_HOST = {}
CLUSTER = {**prometheus.CLUSTER, **grafana.CLUSTER}
