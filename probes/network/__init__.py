"""Phase 2, networking: collectives over growing world sizes, nccl-tests, perftest, pairwise TCP.

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers."""

PROBES = ("collectives", "nccl_tests", "perftest", "tcp_pairs")
