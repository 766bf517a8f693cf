"""Node-side mechanics every phase shares, and nothing else: running commands, rendezvous, process tracking,
readers of /proc, /sys, Slurm and Kubernetes, device and storage-tier discovery. No thresholds, no judgement."""
