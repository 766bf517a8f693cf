"""Node inventory (preflight): CPU, memory, GPUs, OS facts every later check is read against.

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers."""

PROBES = ("node_info",)
