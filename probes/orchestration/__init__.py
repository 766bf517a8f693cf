"""Phase: orchestration."""

PROBES = ("slurm_jobs", "k8s_pods")
