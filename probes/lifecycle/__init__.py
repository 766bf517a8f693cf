"""Phase 2, lifecycle: installs, imports, container and model pulls, serve readiness, internet speed.

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers."""

PROBES = ("pkg_install", "net_speed", "container_pull", "model_pull", "serve_ready")
