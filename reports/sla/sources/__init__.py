"""Source adapters: each turns one kind of record into reports.sla.events.Event rows (the one event table).

- healthprobe: samples of the collection's own health probe (reports/sla/store.py SQLite store)
- slurm: `scontrol show node`, `sinfo` and `sacctmgr show event` outputs
- assessment: the assessment's reboot and fault-injection artifacts (downtime the assessment itself caused)
- imports: provider-supplied CSV or JSON logs
"""
