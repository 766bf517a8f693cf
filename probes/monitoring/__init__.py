"""Phase: monitoring."""

PROBES = ("prometheus", "grafana")
