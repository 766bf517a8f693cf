"""What a run of the destructive phase left out of service, read from its own records on the controller: the plan
playbooks/recover.yml follows after a run was killed (or failed) between taking nodes out and putting them back.

Every batch of the reboot and fault-injection roles writes, before anything destructive happens, its observer's
``sched_watch-<stage>-start`` artifact (the scheduler's nodes in service when the batch began), and, once its nodes
are back as they were, the observer's ``sched_action-<stage>-restore`` artifact. A batch with the first and without
a successful second is open: its nodes may still be drained (by the assessment, or by the provider's health check
reacting to the injected fault). Its nodes to resume are those in service when it began (a reboot batch: those its
drain was issued on, when the drain artifact is there); the restore action resumes only the ones that are not
available now, as the batch's own last step would have.

A node whose GPU was reset through its PCIe bridge is kept out unless its GPU answered afterwards (the
``fault_inject-verify`` artifact): resumed, it would take jobs on a lost GPU.

A run whose controller is still alive (the journal's ``controller`` line: pid and start time on this machine) is
refused: its own last steps are still to come.

    python -m reports.phases.reliability.recovery RUN_DIR     # the plan as JSON; exit 2 with the reason
"""

import json
import os
import socket
import sys

from reports.load import load_artifacts, read_journal
from reports.sla.timeutil import US, TimeError
from reports.sla.timeutil import parse_time as parse_us

PCIE_METHOD = "pcie_bridge_reset"


class NotRecoverable(Exception):
    """The run cannot be recovered from here (not a run, still running); the message says why."""


def _proc_start(pid):
    """The process's start time in clock ticks since boot, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def controller_alive(journal):
    """The pid of the run's controller when it still runs on this machine, else None."""
    line = next((x for x in journal if x.get("event") == "controller"), None)
    if not line or line.get("machine") != socket.gethostname():
        return None
    pid = int(line.get("pid") or 0)
    started = _proc_start(pid) if pid else None
    return pid if started is not None and started == line.get("start_ticks") else None


def _nodes(doc, metric, value=None):
    return sorted({(r.get("labels") or {}).get("node") for r in doc.get("results") or []
                   if r["metric"] == metric and (value is None or r["value"] == value)} - {None})


def _node_of(by_key, host):
    """The host's name in the scheduler: what its fault_injection record says, else its short hostname."""
    record = by_key.get((host, "fault_injection", None))
    node = ((record or {}).get("facts") or {}).get("node")
    if node:
        return node
    hostname = (((by_key.get((host, "node_info", None)) or {}).get("facts") or {}).get("hostname")) or host
    return hostname.split(".")[0]


def _lost_gpus(by_key, docs):
    """{node: why} of the nodes whose GPU was reset through its PCIe bridge and did not answer afterwards."""
    out = {}
    for doc in docs:
        # the first injection, or the fallback after it went unseen (the first's GPU is as lost as the second's)
        if doc["probe"] != "fault_inject" or doc.get("variant") not in (None, "fallback"):
            continue
        if ((doc.get("facts") or {}).get("method")) != PCIE_METHOD:
            continue
        verify = by_key.get((doc["host"], "fault_inject", "verify"))
        answers = next((r["value"] for r in (verify or {}).get("results") or [] if r["metric"] == "gpu_answers"),
                       None)
        if answers == 1:
            continue
        out[_node_of(by_key, doc["host"])] = (
            "its GPU was reset through its PCIe bridge and %s: reboot the node, then resume it" % (
                "did not answer afterwards" if answers is not None else "was not seen answering since"))
    return out


def _hold_ends(by_key, docs):
    """{node: epoch s} when the DCGM hold of each node injected through DCGM stops re-injecting on its own (its
    injection plus the probe's hold_s, detect + remediation timeouts): until then its fault stays detectable, even
    after the controller is gone."""
    out = {}
    for doc in docs:
        if doc["probe"] != "fault_inject" or doc.get("variant") not in (None, "fallback"):
            continue
        if ((doc.get("facts") or {}).get("method")) != "dcgm":
            continue
        hold = float((doc.get("params") or {}).get("hold_s") or 0)
        for r in doc.get("results") or []:
            if r["metric"] == "injected_at":
                node = _node_of(by_key, doc["host"])
                out[node] = max(out.get(node, 0.0), float(r["value"]) + hold)
    return out


def parse_time(text):
    """Epoch seconds of an RFC 3339 time (the artifacts' and the journal's), or 0.0 when there is none."""
    try:
        return parse_us(text) / US
    except TimeError:
        return 0.0


def _time_of(doc):
    return parse_time(doc.get("started_at"))


def _batch_state(by_key, docs, observer, stage):
    """(open or closed, why) of one batch, from the restore its observer ran and the per-node records its last step
    writes (reboot / fault_injection, facts.stage)."""
    restore = by_key.get((observer, "sched_action", stage + "-restore"))
    if restore is not None and restore["status"] == "ok":
        return "closed", "its nodes were put back by the run"
    if restore is not None:
        return "open", "its restore did not finish: %s" % (restore.get("reason") or restore["status"])
    if any(d["probe"] in ("reboot", "fault_injection") and d.get("variant") is None
           and (d.get("facts") or {}).get("stage") == stage for d in docs):
        return "closed", "the batch ended without a restore (the role's restore was off): its nodes stay as left"
    return "open", "the run ended before the batch's last steps"


def plan(run_dir):
    run_dir = os.path.abspath(run_dir)
    if not os.path.isfile(os.path.join(run_dir, "assess_run.json")):
        raise NotRecoverable("%s is not a run directory (no assess_run.json): give recover_run the directory "
                             "runs/<provider>/<run id> of the run to recover" % run_dir)
    with open(os.path.join(run_dir, "assess_run.json")) as fh:
        request = json.load(fh)
    journal = read_journal(os.path.join(run_dir, "journal.jsonl"))
    pid = controller_alive(journal)
    if pid:
        raise NotRecoverable("run %s is still going (its ansible-playbook, pid %d, is alive): its own last steps "
                             "put the nodes back; stop it first" % (request.get("id"), pid))
    docs, errors = load_artifacts(os.path.join(run_dir, "artifacts"))
    by_key = {(d["host"], d["probe"], d.get("variant")): d for d in docs}
    lost = _lost_gpus(by_key, docs)
    holds = _hold_ends(by_key, docs)
    last_sign = max([parse_time(x.get("ts")) for x in journal] + [0.0])
    stages = []
    for doc in docs:
        variant = doc.get("variant") or ""
        if doc["probe"] != "sched_watch" or not variant.endswith("-start") or doc["status"] != "ok":
            continue
        stage, observer = variant[:-len("-start")], doc["host"]
        test = "reboot" if stage.startswith("reboot-") else "fault_injection"
        resume = _nodes(doc, "available", 1)
        drain = by_key.get((observer, "sched_action", stage + "-drain"))
        if test == "reboot" and drain is not None:
            resume = _nodes(drain, "drain_issued_at")
        keep_out = {n: lost[n] for n in resume if n in lost}
        state, why = _batch_state(by_key, docs, observer, stage)
        # Drains of this batch's making happened from its start until the injected fault could still be detected
        # after the controller's last sign of life, or after its nodes' DCGM holds stopped re-injecting, whichever
        # is later (a hold outlives a dead controller by up to the remediation timeout); one drained at another
        # time is someone else's (sched_action restore checks it where the scheduler stamps its reasons: Slurm).
        detect_s = float((doc.get("params") or {}).get("detect_timeout") or 600)
        held = max([holds[n] for n in resume if n in holds] + [0.0])
        stages.append({
            "stage": stage, "test": test, "observer": observer,
            "scheduler": (doc.get("facts") or {}).get("scheduler") or "none",
            "open": state == "open", "why": why,
            "resume": [n for n in resume if n not in keep_out], "keep_out": keep_out,
            "drained_between": [_time_of(doc), max(last_sign, _time_of(doc), held) + detect_s],
        })
    stages.sort(key=lambda s: s["stage"])
    return {"run_dir": run_dir, "run_id": request.get("id") or os.path.basename(run_dir),
            "hosts": sorted(request.get("hosts") or []), "stages": stages,
            "open": [s for s in stages if s["open"]],
            "unreadable": ["%s: %s" % (e["path"], e["error"]) for e in errors]}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m reports.phases.reliability.recovery RUN_DIR", file=sys.stderr)
        return 2
    try:
        print(json.dumps(plan(argv[0]), indent=1, sort_keys=True))
    except NotRecoverable as exc:
        print(str(exc), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
