"""Phase 3, burn-in and soak: GEMM workers and all-to-all at once under one monitor, fabric and storage soaks.

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers."""

PROBES = ("burnin", "monitor", "fabric_soak", "storage_soak")
