"""Phase 2, storage: the tiers (discovered, and which the nodes share), fio sweeps per tier and client count,
checkpoints, metadata storms, S3, import time, datagen.

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers."""

PROBES = ("storage_tiers", "fio_sweep", "checkpoint", "metadata", "object_store", "import_time", "datagen",
          "io_tools_run")
