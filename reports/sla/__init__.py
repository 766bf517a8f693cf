"""SLA accounting for clustermax.assess: events -> downtime intervals -> availability, credits and triggers.

    sources/*      adapters that fill the one event table (events.Event): health-probe samples (store.py),
                   Slurm states and events, the assessment's reboot / fault-injection timings, provider CSV/JSON
    intervals.py   half-open interval arithmetic on UTC microseconds (merge, clip, subtract, at_least)
    availability.py the rules (node rule, NVL72 rack rule, exclusions, credits, breaches, termination triggers)
    tiers.py       reports/data/sla_tiers.yml (tiers, credit ladders, systems, exclusion kinds)
    review.py      the monthly review: stage inputs, judge, write md/html/csv/json with evidence and a manifest
    awx.py         AWX-compatible rrule validation for playbooks/awx_setup.yml
    runner.py      run playbooks through ansible-runner with a live progress line (console script clustermax-run)

UTC inside (integer microseconds), explicit time zones at the edges (timeutil.py).
`python -m reports.sla --help` lists the commands the playbooks use.
"""
