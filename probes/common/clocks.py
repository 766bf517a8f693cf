"""Clock readings across hosts: the line every clock reading prints, and hosts' clocks against this one's.

A node prints its clock as CLOCK_LINE (`date +'clustermax-assess-clock: %s.%N'`: the reliability role's observer,
roles/reliability/tasks/observer_clock.yml; the monitoring role's reading of the runner and observers; the Slurm
probe's `srun date` on a launch node), among whatever its terminal printed. host_clocks turns readings taken in turn,
this host's before and after each other one's, into each host's offset and its uncertainty.
"""

import re

CLOCK_LINE = re.compile(r"^clustermax-assess-clock: ([0-9]+(?:\.[0-9]+)?)\s*$", re.M)


def host_clocks(readings):
    """{host: {offset_s, uncertainty_s}} of the clocks the role read in turn ([[host, output], ...], this host's
    first and between any two others'): a host's offset is its clock minus the midpoint of this host's readings just
    before and after it, the uncertainty half the time between those two. {host: {error}} where its reading or this
    host's around it is missing (unreachable, no clock line)."""
    if not readings:
        return {}
    me = readings[0][0]

    def clock(output):
        found = CLOCK_LINE.search(str(output or ""))
        return float(found.group(1)) if found else None

    mine = [(i, clock(out)) for i, (host, out) in enumerate(readings) if host == me]
    out = {}
    for i, (host, output) in enumerate(readings):
        if host == me:
            continue
        before = next((t for j, t in reversed(mine) if j < i), None)
        after = next((t for j, t in mine if j > i), None)
        theirs = clock(output)
        if theirs is None:
            out[host] = {"error": "no clock read: %s" % (" ".join(str(output or "").split())[:120] or "no output")}
        elif before is None or after is None:
            out[host] = {"error": "this host's clock was not read both before and after it"}
        else:
            out[host] = {"offset_s": round(theirs - (before + after) / 2, 3),
                         "uncertainty_s": round((after - before) / 2 + 0.001, 3)}
    return out
