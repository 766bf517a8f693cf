"""Kubernetes as the destructive phase sees it, through kubectl: node phase from `kubectl get nodes -o json`
(conditions, spec.unschedulable, taints), cordon/drain/uncordon, and a fresh pod pinned to one node.

Phases are those of probes/common/sched.py. Taints that a node already had when the watch began (a GPU pool's
`nvidia.com/gpu:NoSchedule`, a control-plane taint) are part of its normal state: only taints added since count.
Without such a baseline (a one-off reading by an action) only Kubernetes' own node.kubernetes.io/* taints count.
"""

import json
import time

from probes.common.command import run_cmd

TAKING_EFFECTS = ("NoSchedule", "NoExecute")
# Taints Kubernetes itself sets on a node that is not Ready or unreachable: the node is down, not merely drained.
DOWN_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _ready(node):
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status"), cond.get("reason"), cond.get("message")
    return "Unknown", None, None


def taint_keys(node):
    return sorted("%s:%s" % (t.get("key"), t.get("effect")) for t in (node.get("spec") or {}).get("taints") or []
                  if t.get("effect") in TAKING_EFFECTS)


def bad_conditions(node):
    """Conditions other than Ready that report a problem (True for *Pressure/…Unavailable, or a health agent's own
    condition such as GpuHealthy=False)."""
    out = []
    for cond in (node.get("status") or {}).get("conditions") or []:
        ctype, status = cond.get("type"), cond.get("status")
        if ctype == "Ready":
            continue
        low = ctype.lower()
        # "KubeletUnhealthy" ends in "healthy": node-problem-detector's *Unhealthy conditions are False when well
        healthy_when_true = low.endswith(("healthy", "ok", "ready")) and not low.endswith(("unhealthy", "notready"))
        if (status == "True") != healthy_when_true and status in ("True", "False"):
            out.append("%s=%s" % (ctype, status))
    return sorted(out)


# The GPU product labels of NVIDIA's GPU feature discovery and AMD's node labeller (its -product-name).
GPU_PRODUCT_LABELS = ("nvidia.com/gpu.product", "amd.com/gpu.product-name")


def pool(node):
    """What a hot spare must share with the node it replaces: the GPU product label, else the allocatable GPU
    resource and count ("nvidia.com/gpu=8"), else "no-gpu" (a CPU or control-plane node becoming Ready is no GPU
    node's spare). A new GPU node's labels and resources come a while after it is Ready: the watcher records the
    change (samples.OTHER_CHANGE_KEYS)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key in GPU_PRODUCT_LABELS:
        if labels.get(key):
            return labels[key]
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for resource in GPU_RESOURCES:
        if str(allocatable.get(resource) or "0") not in ("0", ""):
            return "%s=%s" % (resource, allocatable[resource])
    return "no-gpu"


def sample(name, node, t, baseline_taints=None):
    if node is None:
        return {"t": t, "node": name, "phase": "missing", "state": None, "reason": None, "pool": None}
    ready, why, message = _ready(node)
    taints = taint_keys(node)
    if baseline_taints is None:
        new_taints = [k for k in taints if k.startswith("node.kubernetes.io/")]
    else:
        new_taints = [k for k in taints if k not in set(baseline_taints)]
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    conds = bad_conditions(node)
    if ready != "True" or any(k.split(":")[0] in DOWN_TAINTS for k in new_taints):
        phase = "down"
    elif unschedulable or new_taints:
        phase = "drained"
    elif conds:
        phase = "unhealthy"
    else:
        phase = "available"
    state = ["Ready" if ready == "True" else "NotReady"]
    if unschedulable:
        state.append("SchedulingDisabled")
    reason = "; ".join(x for x in [why if ready != "True" else None, message if ready != "True" else None]
                       + new_taints + conds if x) or None
    return {"t": t, "node": name, "phase": phase, "state": ",".join(state), "reason": reason, "pool": pool(node),
            "taints": taints, "boot_id": ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")}


def parse_nodes(text):
    doc = json.loads(text)
    items = doc.get("items") if doc.get("kind") == "List" or "items" in doc else [doc]
    return {(n.get("metadata") or {}).get("name"): n for n in items}


def pool_taints(names, nodes, baseline_taints=None):
    """The taints the named nodes had when the watch began (their baseline, else what they have in this reading,
    which is the baseline's own reading): the pool's normal taints, against which the other nodes are read, since
    they have no baseline of their own (a spare joins with the GPU pool's taint; a spare kept off by a taint of its
    own until it is needed has one the pool does not)."""
    if baseline_taints is not None:
        return sorted({k for n in names for k in baseline_taints.get(n, [])})
    return sorted({k for n in names if n in nodes for k in taint_keys(nodes[n])})


def samples(names, nodes, t, baseline_taints=None, others=False):
    """The samples of one reading ({name: Node}): one per named node, then with others one per other node, marked
    "other" and read against the pool's taints (pool_taints)."""
    out = [sample(n, nodes.get(n), t, None if baseline_taints is None else baseline_taints.get(n, []))
           for n in names]
    if others:
        pool = pool_taints(names, nodes, baseline_taints)
        out += [dict(sample(n, nodes[n], t, pool), other=True) for n in sorted(set(nodes) - set(names))]
    return out


def read(names, t, kubectl=("kubectl",), baseline_taints=None, timeout=30.0, others=False):
    """One sample per named node; with others also one per other node the API server lists (marked "other").
    A failed kubectl gives phase unknown for every named node and nothing about the others."""
    res = run_cmd(list(kubectl) + ["get", "nodes", "-o", "json"], timeout=timeout)
    if res.rc != 0:
        why = (res.stderr or res.stdout).strip().splitlines()
        return [{"t": t, "node": n, "phase": "unknown", "state": None,
                 "reason": "kubectl: %s" % (why[-1] if why else "rc=%s" % res.rc)} for n in names]
    return samples(names, parse_nodes(res.stdout), t, baseline_taints, others)


def available(kubectl=("kubectl",)):
    res = run_cmd(list(kubectl) + ["get", "nodes", "-o", "name"], timeout=30)
    if res.missing:
        return "kubectl not found"
    if res.rc != 0:
        return "kubectl get nodes: %s" % ((res.stderr or res.stdout).strip().splitlines() or ["failed"])[-1]
    return None


def drain(name, reason, kubectl=("kubectl",), timeout_s=600):
    """Cordon and drain (the seed's order); the reason goes on the node as an annotation."""
    run_cmd(list(kubectl) + ["annotate", "--overwrite", "node", name, "clustermax.assess/reason=%s" % reason],
            timeout=30)
    return run_cmd(list(kubectl) + ["drain", name, "--ignore-daemonsets", "--delete-emptydir-data",
                                    "--timeout=%ds" % int(timeout_s)], timeout=timeout_s + 30)


def resume(name, kubectl=("kubectl",)):
    run_cmd(list(kubectl) + ["annotate", "node", name, "clustermax.assess/reason-"], timeout=30)
    return run_cmd(list(kubectl) + ["uncordon", name], timeout=30)


# The GPU device plugins' resource names: NVIDIA's, and AMD's (ROCm/k8s-device-plugin).
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")


def pod_overrides(name, image, command, gpus, gpu_resource="nvidia.com/gpu"):
    if gpu_resource not in GPU_RESOURCES:
        raise ValueError("gpu_resource %r: want one of %s" % (gpu_resource, ", ".join(GPU_RESOURCES)))
    container = {"name": "probe", "image": image, "command": list(command)}
    if gpus:
        container["resources"] = {"limits": {gpu_resource: int(gpus)}}
    # nodeSelector, not nodeName: the pod goes through the scheduler, so a cordoned or tainted node refuses it.
    spec = {"nodeSelector": {"kubernetes.io/hostname": name}, "restartPolicy": "Never", "containers": [container]}
    if gpus:
        spec["tolerations"] = [{"key": gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "spec": spec}


def job(name, command, image, gpus=0, kubectl=("kubectl",), wait_s=300, timeout=None, gpu_resource="nvidia.com/gpu"):
    """A fresh pod on this node running command (nvidia-smi, or amd-smi, on GPU nodes), removed afterwards."""
    pod = "clustermax-assess-%d" % int(time.time() * 1000)
    argv = list(kubectl) + ["run", pod, "--image=%s" % image, "--restart=Never", "--rm", "--attach", "--quiet",
                            "--pod-running-timeout=%ds" % int(wait_s),
                            "--overrides=%s" % json.dumps(pod_overrides(name, image, command, gpus, gpu_resource))]
    return run_cmd(argv, timeout=timeout or wait_s + 60)
