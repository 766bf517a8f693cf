"""Kubernetes API objects as the k8s_pods probe reads and writes them: the manifests it creates (every object carries
the run's label, so one label selector finds and deletes all of them), and pure readings of what `kubectl get -o
json` returns -- a pod's timeline from the API's own timestamps, why a pod is Pending (the scheduler's message or
the kubelet's waiting reason), GPUs asked and seen, a delete that does not finish, what was left, the NetworkOperator
pattern and the DRA / ComputeDomain objects present. No thresholds: the controller judges
(reports/phases/orchestration/kubernetes.py).

Standard library only, like everything under probes/.
"""

import json
import re
from datetime import datetime

from probes.common.device import SMI_GPU_LINE, SMI_MIG_LINE, count_smi_listed

LABEL_RUN = "clustermax.assess/run"
LABEL_TEST = "clustermax.assess/test"
LABEL_INDEX = "clustermax.assess/index"
# Pods are named by the API from generateName: a name of ours could collide with a leftover of an earlier run.
NAME_PREFIX = "cmx-"
DATA_MOUNT = "/data"
PVC_FILE = DATA_MOUNT + "/clustermax-assess.bin"

# ---------------------------------------------------------------------------------------------------------------
# labels and manifests


def label_value(text):
    """A label value from any text (a run id): at most 63 characters of [A-Za-z0-9_.-], starting and ending with an
    alphanumeric character (the API refuses anything else)."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", str(text))[:63]
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
    return value or "run"


def run_selector(run):
    return "%s=%s" % (LABEL_RUN, run)


def _labels(run, test, index):
    return {LABEL_RUN: run, LABEL_TEST: test, LABEL_INDEX: str(index)}


def pod_manifest(run, test, index, image, command, gpu_resource=None, gpus=0, cpu=None, memory=None, claim=None,
                 restart="Never", grace_s=5):
    """A pod of one test: `gpus` of `gpu_resource` as limits (extended resources need no request), the GPU taint
    tolerated (GPU pools carry it), an optional CPU/memory request (sandbox pods) and PVC `claim` mounted at /data.
    A short grace period: the probe measures the API's teardown, not our container's SIGTERM handling."""
    container = {"name": "probe", "image": image, "command": list(command), "imagePullPolicy": "IfNotPresent"}
    resources = {}
    if gpus:
        resources["limits"] = {gpu_resource: str(int(gpus))}
    if cpu or memory:
        resources["requests"] = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
        resources.setdefault("limits", {}).update(resources["requests"])
    if resources:
        container["resources"] = resources
    spec = {"restartPolicy": restart, "terminationGracePeriodSeconds": int(grace_s), "containers": [container]}
    if gpus:
        spec["tolerations"] = [{"key": gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]
    if claim:
        container["volumeMounts"] = [{"name": "data", "mountPath": DATA_MOUNT}]
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "%s%s-%s-" % (NAME_PREFIX, test, index), "labels": _labels(run, test, index)},
            "spec": spec}


def batch_manifest(pods):
    """Several pods created by one `kubectl create -f`: a v1 List (kubectl sends each item, returns a List)."""
    return {"apiVersion": "v1", "kind": "List", "items": list(pods)}


def pvc_manifest(run, index, size, storage_class=""):
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class  # else the cluster's default class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"generateName": "%spvc-%s-" % (NAME_PREFIX, index), "labels": _labels(run, "pvc", index)},
            "spec": spec}


def pvc_writer_command(size_mb=16):
    """Write and fsync a file on the volume (dd's conv=fsync: the data reached the device before dd exits), then
    sync the filesystem: the pod succeeds only when the write is durable."""
    return ["sh", "-c", "dd if=/dev/zero of=%s bs=1M count=%d conv=fsync && sync" % (PVC_FILE, int(size_mb))]


def hold_command(hold_s=3600, before=""):
    """Stay up until deleted, and exit at once on the kubelet's SIGTERM (a shell as PID 1 ignores it, so a bare sleep
    would take the whole grace period: the delete time would measure our container, not the API and kubelet)."""
    return ["sh", "-c", "%strap 'exit 0' TERM; sleep %d & wait" % (before, int(hold_s))]


# The line the GPU pod prints once `nvidia-smi -L` has finished: Ready comes as soon as the container starts (no
# readiness probe), while nvidia-smi may take seconds (no persistence mode), so the log is read until this line. It
# carries nvidia-smi's exit status ("CMXA-GPUS-LISTED exit=0"): the line comes whether nvidia-smi ran or not.
GPUS_LISTED = "CMXA-GPUS-LISTED"


def gpu_command(hold_s=3600):
    """List the GPUs the container was given (read back with `kubectl logs`, which holds both of the container's
    streams: a missing nvidia-smi's "not found" and nvidia-smi's own errors too), then hold them until deleted."""
    return hold_command(hold_s, before="nvidia-smi -L; echo %s exit=$?; " % GPUS_LISTED)


def cleanup_plan(run, namespace):
    """The kubectl argument lists (after `kubectl` and its global flags) that remove everything of this run in the
    namespace and then read what is left: one label selector finds every pod and PVC the probe created, whatever
    step failed. --wait=false: the API takes the deletes; what did not go is read back, not waited on forever."""
    selector = run_selector(run)
    return {"delete": ["delete", "pods,persistentvolumeclaims", "-l", selector, "-n", namespace, "--wait=false",
                       "--ignore-not-found"],
            "left": ["get", "pods,persistentvolumeclaims", "-l", selector, "-n", namespace, "-o", "json"]}


# ---------------------------------------------------------------------------------------------------------------
# reading API objects


def parse_time(text):
    """An API timestamp (RFC 3339, "2021-05-05T16:22:15Z", maybe with fractions) -> seconds since the epoch, or
    None."""
    if not text or not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def items(doc):
    """The objects of a `kubectl get -o json` answer: a List's items, or the one object."""
    if not isinstance(doc, dict):
        return []
    if "items" in doc:
        return [i for i in doc.get("items") or [] if isinstance(i, dict)]
    return [doc] if doc.get("kind") else []


def name_of(obj):
    return ((obj or {}).get("metadata") or {}).get("name")


def condition(pod, ctype):
    """(status, lastTransitionTime, reason, message) of one pod condition, or (None, None, None, None)."""
    for cond in ((pod or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond.get("status"), cond.get("lastTransitionTime"), cond.get("reason"), cond.get("message")
    return None, None, None, None


def _container_started(pod):
    """Earliest startedAt of the pod's containers (running, or terminated after it ran)."""
    times = []
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        for key in ("running", "terminated"):
            t = parse_time((state.get(key) or {}).get("startedAt"))
            if t is not None:
                times.append(t)
    return min(times) if times else None


def pod_state(pod):
    """What a poll needs from one pod: phase, node, scheduled / started / ready / done, terminating, and the reason
    it waits (the scheduler's Unschedulable message, or a container's waiting reason such as ImagePullBackOff)."""
    status = (pod or {}).get("status") or {}
    meta = (pod or {}).get("metadata") or {}
    sched, _, sched_reason, sched_msg = condition(pod, "PodScheduled")
    ready, _, _, _ = condition(pod, "Ready")
    node = ((pod or {}).get("spec") or {}).get("nodeName")
    phase = status.get("phase")
    waiting = [((cs.get("state") or {}).get("waiting") or {}) for cs in status.get("containerStatuses") or []]
    waiting = [w for w in waiting if w]
    # an init container that cannot start holds the pod's containers at PodInitializing: its reason is the pod's,
    # as kubectl shows it ("Init:ImagePullBackOff"); one that failed is "Init:Error" (or its waiting CrashLoopBackOff)
    for cs in status.get("initContainerStatuses") or []:
        st = cs.get("state") or {}
        w, t = st.get("waiting") or {}, st.get("terminated") or {}
        if w.get("reason") and w["reason"] != "PodInitializing":
            waiting = [dict(w, reason="Init:%s" % w["reason"])]
            break
        if t and t.get("exitCode") not in (0, None):
            waiting = [{"reason": "Init:%s" % (t.get("reason") or "Error"),
                        "message": t.get("message") or "init container %s exited %s" % (cs.get("name"),
                                                                                     t.get("exitCode"))}]
            break
    running = any((cs.get("state") or {}).get("running") for cs in status.get("containerStatuses") or [])
    done = phase in ("Succeeded", "Failed")
    reason = None
    if sched == "False":
        reason = "%s: %s" % (sched_reason or "Unschedulable", sched_msg) if sched_msg else sched_reason
    elif waiting:
        w = waiting[0]
        reason = "%s: %s" % (w.get("reason"), w.get("message")) if w.get("message") else w.get("reason")
    return {"name": meta.get("name"), "phase": phase, "node": node,
            "scheduled": sched == "True" or bool(node), "started": running or done or _container_started(pod)
            is not None, "ready": ready == "True", "done": done, "succeeded": phase == "Succeeded",
            "terminating": bool(meta.get("deletionTimestamp")), "reason": reason}


def pod_timeline(pod):
    """Seconds from the pod's creationTimestamp to PodScheduled, Initialized, its first container's start and Ready,
    by the API's own timestamps (one-second resolution; None where the pod has not got there)."""
    created = parse_time(((pod or {}).get("metadata") or {}).get("creationTimestamp"))
    out = {"schedule_s": None, "initialized_s": None, "start_s": None, "ready_s": None}
    if created is None:
        return out
    for key, ctype in (("schedule_s", "PodScheduled"), ("initialized_s", "Initialized"), ("ready_s", "Ready")):
        status, when, _, _ = condition(pod, ctype)
        t = parse_time(when)
        if status == "True" and t is not None:
            out[key] = round(t - created, 3)
    started = _container_started(pod)
    if started is not None:
        out["start_s"] = round(started - created, 3)
    return out


def quantity(text):
    """An integer quantity of a countable resource ("1", 1, "70"); 0 for anything else."""
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return 0


def gpus_requested(pod, resource):
    """GPUs the API holds for the pod: the sum over its containers of the resource's limit (an extended resource's
    request equals its limit), init containers not counted (they run before, on the same devices)."""
    total = 0
    for c in ((pod or {}).get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        total += quantity((res.get("limits") or {}).get(resource, (res.get("requests") or {}).get(resource, 0)))
    return total


def node_allocatable(node, resource):
    return quantity((((node or {}).get("status") or {}).get("allocatable") or {}).get(resource, 0))


_LISTED = re.compile(r"^%s(?: exit=(\d+))?[ \t]*$" % GPUS_LISTED, re.M)
# What nvidia-smi prints when NVML works and finds no GPU (exit status 6): a count, 0, not a failure to count.
NO_DEVICES = "No devices were found"


def gpu_listing(log_text):
    """The churn pod's log read: {"visible": devices nvidia-smi listed, or None when it did not list them,
    "exit": nvidia-smi's exit status from the marker line (None from a marker without one), "error": why the count
    is unknown, or what it said beside the devices it listed}. Known when nvidia-smi exited 0, said it found no
    device, or listed devices before failing on another (those are the devices the container could use). Unknown
    when it listed none and is missing (the shell's "nvidia-smi: not found", exit 127: an image without it, a node
    whose runtime does not inject it, amd.com/gpu) or failed (no driver, a driver/NVML mismatch): no GPU was counted
    then, which is not 0 GPUs seen."""
    text = log_text or ""
    m = _LISTED.search(text)
    status = int(m.group(1)) if m and m.group(1) is not None else None
    lines = [x.rstrip() for x in (text[:m.start()] if m else text).splitlines() if x.strip()]
    listed = count_smi_listed(lines)
    other = [x.strip() for x in lines if not SMI_GPU_LINE.match(x) and not SMI_MIG_LINE.match(x)]
    found_none = bool(other) and not listed and all(x == NO_DEVICES for x in other)
    if status == 0 or found_none or (status is None and (listed or not other)):
        return {"visible": listed, "exit": status, "error": None}
    said = " / ".join(other)[-300:] or "no output"
    if listed:
        # it ran and listed devices, and failed on another ("Unable to determine the device handle for GPU1: ...
        # Unknown Error": a GPU fallen off the bus): the container saw the devices listed, and no more
        return {"visible": listed, "exit": status, "error": "nvidia-smi -L exit %s: %s" % (status, said)}
    if status is None:
        return {"visible": None, "exit": None, "error": "nvidia-smi -L listed no GPU: %s" % said}
    return {"visible": None, "exit": status, "error": "nvidia-smi -L exit %d: %s" % (status, said)}


def visible_gpus(log_text):
    """Devices `nvidia-smi -L` listed in the container's log (gpu_listing), None when it did not list them."""
    return gpu_listing(log_text)["visible"]


_COUNTED = re.compile(r"^\s*(\d+)\s+(.+?)\s*$")
_PREDICATE = re.compile(r"^\s*(.+?)\s*\((\d+)\)\s*$")


def parse_scheduler_message(message):
    """The scheduler's FailedScheduling message -> {"nodes": total nodes or None, "reasons": {reason: nodes, None
    for a reason of the pod itself}}.
    Current schedulers: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are
    available: ..." (the preemption part is not why the pod waits and is dropped); before 1.10: "No nodes are
    available that match all of the predicates: Insufficient cpu (19), Insufficient memory (19)."."""
    text = (message or "").strip()
    out = {"nodes": None, "reasons": {}}
    m = re.match(r"^(\d+)/(\d+) nodes are available:\s*(.*)$", text, re.S)
    if m:
        out["nodes"] = int(m.group(2))
        body = re.split(r"\.?\s*preemption:", m.group(3), maxsplit=1)[0]
        # "<n> <why>" joined by ", ", where a why may hold ", " itself (before 1.25: "1 node(s) had taint {k: v},
        # that the pod didn't tolerate"), and a reason of the pod itself has no count ("pod has unbound immediate
        # PersistentVolumeClaims": every node, None)
        for part in re.split(r",\s+(?=\d+\s)", body.rstrip(". ")):
            c = _COUNTED.match(part)
            if c:
                key = c.group(2).rstrip(".")
                out["reasons"][key] = out["reasons"].get(key, 0) + int(c.group(1))
            elif part.strip():
                out["reasons"].setdefault(part.strip().rstrip("."), None)
        return out
    m = re.match(r"^No nodes are available that match all of the (?:following )?predicates:+\s*(.*)$", text, re.S)
    if m:
        for part in m.group(1).rstrip(". ").split(", "):
            c = _PREDICATE.match(part)
            if c:
                out["reasons"][c.group(1)] = out["reasons"].get(c.group(1), 0) + int(c.group(2))
        return out
    if text:
        out["reasons"][text.rstrip(".")] = None
    return out


def scheduling_messages(events, pod_name=None):
    """FailedScheduling messages of the events about one pod (all pods with pod_name None), newest last."""
    found = []
    for ev in items(events):
        inv = ev.get("involvedObject") or ev.get("regarding") or {}
        if ev.get("reason") != "FailedScheduling" or (pod_name and inv.get("name") != pod_name):
            continue
        when = ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp") or ""
        found.append((when, ev.get("message") or ev.get("note") or ""))
    return [m for _, m in sorted(found, key=lambda x: x[0])]


def warning_reasons(events, pod_name=None):
    """Reasons of the Warning events about a pod other than FailedScheduling (FailedMount, FailedCreatePodSandBox,
    Failed image pulls ...): {reason: latest message}."""
    out = {}
    for ev in items(events):
        inv = ev.get("involvedObject") or ev.get("regarding") or {}
        if ev.get("type") != "Warning" or ev.get("reason") == "FailedScheduling":
            continue
        if pod_name and inv.get("name") != pod_name:
            continue
        out[ev.get("reason") or "?"] = ev.get("message") or ev.get("note") or ""
    return out


def pending_reasons(pods, events_by_pod):
    """Why the pods that did not reach Ready wait: {"reasons": {reason: pods}, "messages": [distinct messages]}.
    A pod's reasons come from the newest FailedScheduling event about it (each reason the scheduler names, e.g.
    "Insufficient nvidia.com/gpu"), else its PodScheduled=False message, else its container's waiting reason or
    its other Warning events (scheduled, not started: an image pull, a volume mount)."""
    reasons, messages = {}, []
    for pod in pods:
        name = name_of(pod)
        events = (events_by_pod or {}).get(name)
        sched = scheduling_messages(events, name) if events else []
        _, _, _, cond_msg = condition(pod, "PodScheduled")
        state = pod_state(pod)
        found = []
        text = sched[-1] if sched else (cond_msg if condition(pod, "PodScheduled")[0] == "False" else None)
        if text:
            found = list(parse_scheduler_message(text)["reasons"])
            messages.append(text)
        else:
            if state["reason"]:
                # "ImagePullBackOff: <message>" -> ImagePullBackOff; "Init:ImagePullBackOff: …" keeps its "Init:"
                found.append(":".join(state["reason"].split(":")[:2 if state["reason"].startswith("Init:") else 1]))
                messages.append(state["reason"])
            for reason, msg in warning_reasons(events, name).items():
                found.append(reason)
                messages.append("%s: %s" % (reason, msg))
        if not found:
            found = ["Scheduled, not Ready" if state["scheduled"] else "Pending (no reason recorded)"]
        for r in dict.fromkeys(found):
            reasons[r] = reasons.get(r, 0) + 1
    return {"reasons": reasons, "messages": list(dict.fromkeys(messages))[:10]}


def stuck_object(obj):
    """What keeps a deleted object: its deletionTimestamp, grace period, finalizers, phase and node."""
    meta = (obj or {}).get("metadata") or {}
    return {"kind": (obj or {}).get("kind") or "Pod", "name": meta.get("name"),
            "deletion_timestamp": meta.get("deletionTimestamp"),
            "grace_s": meta.get("deletionGracePeriodSeconds"), "finalizers": list(meta.get("finalizers") or []),
            "phase": ((obj or {}).get("status") or {}).get("phase"),
            "node": ((obj or {}).get("spec") or {}).get("nodeName")}


def leftovers(doc):
    """The run's objects still there after cleanup: [{kind, name, terminating, finalizers, phase}]."""
    out = []
    for obj in items(doc):
        s = stuck_object(obj)
        out.append({"kind": s["kind"], "name": s["name"], "terminating": bool(s["deletion_timestamp"]),
                    "finalizers": s["finalizers"], "phase": s["phase"]})
    return out


def not_found(result):
    """Whether a `kubectl get` of one named object says it no longer exists."""
    text = (result.stderr or "") + (result.stdout or "")
    return result.rc not in (0, None) and ("NotFound" in text or "not found" in text)


# ---------------------------------------------------------------------------------------------------------------
# NetworkOperator patterns and DRA


def _resource_names(pods, nodes):
    seen = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            res = c.get("resources") or {}
            for name in list(res.get("limits") or {}) + list(res.get("requests") or {}):
                seen.setdefault(name, set()).add("pod %s" % name_of(pod))
    for node in nodes:
        for name, value in (((node.get("status") or {}).get("allocatable")) or {}).items():
            if quantity(value) > 0:
                seen.setdefault(name, set()).add("node %s" % name_of(node))
    return seen


def _nad_types(nads):
    """{NAD name: CNI type} (the plugin of its config, the first of a plugin list)."""
    out = {}
    for nad in nads:
        raw = (nad.get("spec") or {}).get("config") or ""
        try:
            conf = json.loads(raw) if raw else {}
        except ValueError:
            conf = {}
        kind = conf.get("type") or ((conf.get("plugins") or [{}])[0]).get("type")
        resource = ((nad.get("metadata") or {}).get("annotations") or {}).get("k8s.v1.cni.cncf.io/resourceName")
        out[name_of(nad)] = {"type": kind, "resource": resource}
    return out


# Resource names -> pattern, in the seed's list ("Networking", NetworkOperator patterns), first match wins.
RESOURCE_PATTERNS = (
    (re.compile(r"^rdma/(rdma_shared_device|hca_shared_devices)"), "rdma_shared_device"),
    (re.compile(r"^nvidia\.com/(hostdev|rdma_host_dev)"), "sriov_host_device"),
    (re.compile(r"^nvidia\.com/mlnx(ics|nics)"), "sriov_ib"),
    (re.compile(r"^nvidia\.com/switchdev"), "ovs_offload"),
    (re.compile(r"^rdma/ib"), "rdma_ib"),
    (re.compile(r"^rdma/roce"), "rdma_roce"),
    (re.compile(r"^rdma/fabric\d+"), "doks_rdma_fabric"),
    (re.compile(r"^nvidia\.com/rdma_"), "rdma_roce"),
    (re.compile(r"^vpc\.amazonaws\.com/efa"), "aws_efa"),
)
# CNI types of NetworkAttachmentDefinitions -> pattern (or the secondary network's kind).
NAD_PATTERNS = {"host-device": "sriov_host_device", "sriov": "sriov_legacy", "ib-sriov": "sriov_ib",
                "ovs": "ovs_offload", "ipoib": "ipoib", "macvlan": "macvlan", "ipvlan": "ipvlan"}
DRANET_DRIVERS = ("dra.net",)
# nvidia.com/ resources that are GPUs (whole, MIG slices, shared), not NICs.
NOT_A_NIC = re.compile(r"^nvidia\.com/(gpu|mig-|vgpu|shared)")


def network_pattern(pods, nodes, nads, claims=()):
    """The NetworkOperator deployment patterns in use, recognised as the seed lists them: from the resource names
    pods ask for and nodes offer (rdma/rdma_shared_device_*, nvidia.com/hostdev, nvidia.com/mlnxnics,
    nvidia.com/switchdev, rdma/ib, rdma/roce, nvidia.com/rdma_*, rdma/fabricN, vpc.amazonaws.com/efa), the CNI type
    of the NetworkAttachmentDefinitions (host-device, sriov, ib-sriov, ovs, ipoib, macvlan), pods' network
    annotations, host networking with an RDMA resource (the host-network fallback) and DraNet claims (GKE).
    -> {"patterns": [...], "evidence": {pattern: [where]}, "networks": {pod: annotation}, "nad_types": {...}}."""
    pods, nodes, nads = list(pods or []), list(nodes or []), list(nads or [])
    evidence = {}

    def note(pattern, where):
        evidence.setdefault(pattern, [])
        if where not in evidence[pattern]:
            evidence[pattern].append(where)

    rdma_resources = set()
    for resource, where in sorted(_resource_names(pods, nodes).items()):
        for rx, pattern in RESOURCE_PATTERNS:
            if rx.match(resource):
                rdma_resources.add(resource)
                for w in sorted(where):
                    note(pattern, "%s (%s)" % (resource, w))
                break
    nad_types = _nad_types(nads)
    for name, info in sorted(nad_types.items()):
        pattern = NAD_PATTERNS.get(info["type"])
        if pattern:
            note(pattern, "NetworkAttachmentDefinition %s (type %s%s)" % (
                name, info["type"], ", resource %s" % info["resource"] if info["resource"] else ""))
    networks = {}
    for pod in pods:
        ann = ((pod.get("metadata") or {}).get("annotations") or {}).get("k8s.v1.cni.cncf.io/networks")
        spec = pod.get("spec") or {}
        asks = {n for c in spec.get("containers") or [] for n in ((c.get("resources") or {}).get("limits") or {})}
        if ann:
            networks[name_of(pod)] = ann.strip()
            # A VF bound through a NAD's resourceName (nvidia.com/<pool>) that no other pattern names: sriov_legacy.
            for resource in sorted(asks - rdma_resources):
                if resource.startswith("nvidia.com/") and not NOT_A_NIC.match(resource):
                    rdma_resources.add(resource)
                    note("sriov_legacy", "%s (pod %s, networks %s)" % (resource, name_of(pod), ann.strip()))
        if spec.get("hostNetwork") and asks & rdma_resources:
            note("host_network", "pod %s: hostNetwork with %s" % (name_of(pod), ", ".join(sorted(asks &
                                                                                                 rdma_resources))))
    for claim in claims or ():
        for r in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
            if r.get("driver") in DRANET_DRIVERS:
                note("gke_dranet", "ResourceClaim %s: %s/%s" % (name_of(claim), r.get("driver"), r.get("device")))
    return {"patterns": sorted(evidence), "evidence": evidence, "networks": networks, "nad_types": nad_types}


def dra_summary(compute_domains=None, claims=None, slices=None, device_classes=None):
    """What exists of DRA and NVIDIA's ComputeDomain (multi-node NVLink through IMEX channels): each argument is a
    `kubectl get -o json` answer, or None where the resource type is not served (the CRD or DRA API absent).
    -> {"compute_domains": [{name, namespace, num_nodes, status, nodes}] or None, "claims": {driver: count} or
    None, "claims_total", "slices": {driver: count} or None, "device_classes": [names] or None}."""
    out = {"compute_domains": None, "claims": None, "claims_total": None, "slices": None, "device_classes": None}
    if compute_domains is not None:
        out["compute_domains"] = [{
            "name": name_of(cd), "namespace": (cd.get("metadata") or {}).get("namespace"),
            "num_nodes": (cd.get("spec") or {}).get("numNodes"),
            "status": (cd.get("status") or {}).get("status") or "not reported",
            "nodes": [{"name": n.get("name"), "clique": n.get("cliqueID"), "status": n.get("status")}
                      for n in (cd.get("status") or {}).get("nodes") or []]} for cd in items(compute_domains)]
    if claims is not None:
        by_driver = {}
        for claim in items(claims):
            results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
            for r in results or [{"driver": "(not allocated)"}]:
                by_driver[r.get("driver")] = by_driver.get(r.get("driver"), 0) + 1
        out["claims"], out["claims_total"] = by_driver, len(items(claims))
    if slices is not None:
        by_driver = {}
        for s in items(slices):
            driver = (s.get("spec") or {}).get("driver")
            by_driver[driver] = by_driver.get(driver, 0) + 1
        out["slices"] = by_driver
    if device_classes is not None:
        out["device_classes"] = sorted(name_of(d) for d in items(device_classes))
    return out
