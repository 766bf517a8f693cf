"""Phase 1, audit: read-only configuration, version, security and health facts of every node.

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers."""

PROBES = ("audit",)
