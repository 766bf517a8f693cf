"""Grading of the orchestration phase: the Slurm half (reports/phases/orchestration/slurm.py, probe slurm_jobs) and
the Kubernetes half (reports/phases/orchestration/kubernetes.py, probe k8s_pods). Both probes run once, from one
host each, so every kind is a cluster kind with its rows on that host (reports/grading/one_host.py); they are listed
here for reports.grading.kinds.register_phase_kinds."""

from reports.phases.orchestration import kubernetes, slurm

PER_HOST = {}
CLUSTER = {**slurm.CLUSTER, **kubernetes.CLUSTER}
