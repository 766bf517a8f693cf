"""Phase 2, GPU compute: GEMM per dtype, grouped GEMM, GEMV, MAMF sweep, copy bandwidth, nvbandwidth, HPL-MxP.

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers."""

PROBES = ("gemm", "gemv", "grouped_gemm", "mamf", "copy_bw", "nvbandwidth", "hpl_mxp")
