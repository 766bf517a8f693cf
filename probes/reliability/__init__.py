"""Phase 3, reliability: reboots and fault injection; raw observations of boots and scheduler states.

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers."""

PROBES = ("boot_id", "reboot", "fault_inject", "fault_injection", "sched_action", "sched_watch", "leftovers")
