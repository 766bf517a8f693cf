"""Names of the probes and the modules that implement them (imported only when run)."""

PROBES = {
    "node_info": "probes.node_info",
}
