"""k8s_pods: Kubernetes orchestration through the user's kubeconfig (seed, Phase 3 "Orchestration").

Runs on one host with kubectl and a kubeconfig that may create pods in `namespace`:
- GPU pod churn: `churn_cycles` pods, one after the other, each asking `gpus_per_pod` of `gpu_resource`, created,
  watched to Ready, its `nvidia-smi -L` read back (GPUs the container sees against GPUs asked and the API's record),
  deleted, and watched until gone; a delete not finished after `delete_timeout_s` is stuck (its deletionTimestamp,
  finalizers and node are kept);
- sandbox pods: CPU-only pods in growing batches (`sandbox_batches`): how many reach Ready within
  `ready_timeout_s`, how long each took, and why the rest are Pending (the scheduler's FailedScheduling events, or a
  container's waiting reason); each batch is deleted and its teardown awaited before the next;
- PVC lifecycle: a claim, a pod that mounts it, writes and fsyncs a file and exits, both deleted and their teardown
  awaited, per cycle;
- what the cluster offers for the fabric: the NetworkOperator pattern in use and the DRA / ComputeDomain objects.
With `warmup`, churn and PVC run one unmeasured cycle first, so the image pull is not in the measured cycles.

Times by the probe's own clock (time.monotonic around create and polling: what a user waits, at poll_s
resolution) and by the API's timestamps (creationTimestamp, the conditions' lastTransitionTime, the container's
startedAt: one-second resolution; creationTimestamp is the API server's clock, the conditions and startedAt the
node's kubelet and runtime, so an "api" time includes any skew between them), both recorded with a `clock` label.

Everything it creates carries the label clustermax.assess/run=<run id> (and test, index); whatever happens, a
finally deletes by that label and reads back what is left. The artifact lists what was created and what was left.
Without kubectl, a reachable API server or the right to create pods, the artifact is skipped with the reason.

Results (labels): schedule_s, start_s, ready_s {test: churn, cycle, clock: probe|api}; pod_ready, delete_s,
gpus_visible, gpus_api {test: churn, cycle}; warmup_s {test: churn|pvc}; sandbox_requested, sandbox_ready,
sandbox_pending {batch}; ready_s {test: sandbox, batch, pod, clock}; teardown_s {test: sandbox, batch}; pvc_ok,
pvc_cycle_s, pvc_write_s, pvc_teardown_s {cycle}; stuck_deletes {test}; left_objects. Facts: server_version,
namespace, run_label, gpu_resource, gpus_per_pod, gpus_allocatable {node: n}, churn [per cycle], sandbox [per batch,
with pending_reasons], pvc [per cycle], stuck_deletes, created, left, network, dra, errors, kubectl_calls.
"""

import json
import os
import re
import time

from probes.common.command import run_cmd
from probes.orchestration import k8s_objects as ko
from probes.params import Param, Params

PARAMS = Params(
    kubectl=Param(str, "kubectl", "the kubectl executable"),
    kubeconfig=Param(str, "", "kubeconfig file (default: kubectl's own, $KUBECONFIG or ~/.kube/config)"),
    context=Param(str, "", "kubeconfig context (default: its current context)"),
    namespace=Param(str, "default", "namespace the test pods and claims are created in"),
    gpu_resource=Param(str, "nvidia.com/gpu", "extended resource the churn pods ask for"),
    gpus_per_pod=Param(int, 1, "GPUs each churn pod asks for (0: CPU-only churn)"),
    image=Param(str, "busybox:1.36", "image of the sandbox pods and of the PVC writer"),
    gpu_image=Param(str, "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "image of the churn pods (runs nvidia-smi "
                                                                         "-L)"),
    churn_cycles=Param(int, 5, "measured create/delete cycles of a GPU pod"),
    sandbox_batches=Param(list, [1, 4, 16], "sizes of the successive batches of CPU-only sandbox pods"),
    sandbox_cpu=Param(str, "100m", "CPU request (and limit) of a sandbox pod"),
    sandbox_memory=Param(str, "64Mi", "memory request (and limit) of a sandbox pod"),
    pvc_cycles=Param(int, 3, "measured PVC cycles (claim, pod writes and fsyncs, both deleted)"),
    pvc_size=Param(str, "1Gi", "size of each claim"),
    pvc_write_mb=Param(int, 16, "MiB the PVC pod writes and fsyncs"),
    storage_class=Param(str, "", "StorageClass of the claims (default: the cluster's default class)"),
    warmup=Param(bool, True, "one unmeasured churn and PVC cycle first (keeps the image pull out of the runs)"),
    ready_timeout_s=Param(float, 300, "seconds a pod (a batch) may take to become Ready (a PVC pod to finish)"),
    delete_timeout_s=Param(float, 120, "seconds a delete may take; one not finished by then is stuck"),
    poll_s=Param(float, 1.0, "seconds between polls of the API"),
    kubectl_timeout_s=Param(float, 60, "seconds one kubectl call may take"),
    max_event_reads=Param(int, 8, "Pending pods of a batch whose events are read for the reason"),
    inspect_cluster=Param(bool, True, "read the NetworkOperator pattern and the DRA / ComputeDomain objects "
                                      "(cluster-wide reads; a forbidden read is recorded, not an error)"),
)

TESTS = ("churn", "sandbox", "pvc")


class Kubectl:
    """kubectl with the user's kubeconfig, context and namespace; every call through run_cmd with a timeout."""

    def __init__(self, p):
        self.base = [p["kubectl"]]
        if p["kubeconfig"]:
            self.base += ["--kubeconfig", p["kubeconfig"]]
        if p["context"]:
            self.base += ["--context", p["context"]]
        self.namespace = p["namespace"]
        self.timeout = p["kubectl_timeout_s"]
        self.calls = 0

    def run(self, args, namespaced=True, timeout=None):
        self.calls += 1
        argv = self.base + list(args) + (["-n", self.namespace] if namespaced else [])
        return run_cmd(argv, timeout=timeout or self.timeout)

    def json(self, args, namespaced=True):
        """(document, None) or (None, why)."""
        res = self.run(list(args) + ["-o", "json"], namespaced)
        if res.rc != 0:
            return None, why(res)
        try:
            return json.loads(res.stdout), None
        except ValueError as exc:
            return None, "not JSON: %s" % exc


def why(res):
    if res.missing:
        return "kubectl not found"
    if res.timed_out:
        return "timed out"
    lines = [x for x in ((res.stderr or "") + "\n" + (res.stdout or "")).splitlines() if x.strip()]
    return lines[0].strip()[:300] if lines else "rc=%s" % res.rc


def server_version(text):
    """The API server's version from `kubectl version` ("Server Version: v1.30.0", or before 1.28
    'Server Version: version.Info{... GitVersion:"v1.17.9" ...}')."""
    m = re.search(r"Server Version:\s*(?:version\.Info\{.*?GitVersion:\"([^\"]+)\".*\}|(\S+))", text or "")
    return (m.group(1) or m.group(2)) if m else None


class Run:
    """One invocation's state: the artifact, the clock, what was created, the files written."""

    def __init__(self, art, p, out_dir, kube):
        self.art, self.p, self.out_dir, self.k = art, p, out_dir, kube
        self.run_label = ko.label_value(art.run_id)
        self.created = []
        self.stuck = []
        self.errors = []
        self.nodes = {}

    def write(self, name, doc):
        """A manifest beside the artifact (what was sent), named in raw."""
        fname = "k8s_pods.%s.json" % name
        with open(os.path.join(self.out_dir, fname), "w") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
        if fname not in self.art.raw:
            self.art.raw.append(fname)
        return os.path.join(self.out_dir, fname)

    def create(self, name, manifest, test):
        """`kubectl create -f` of a manifest -> (created objects, None) or (None, why); each created object is
        recorded with its kind and name."""
        path = self.write(name, manifest)
        res = self.k.run(["create", "-f", path, "-o", "json"])
        if res.rc != 0:
            return None, why(res)
        try:
            objs = ko.items(json.loads(res.stdout))
        except ValueError as exc:
            return None, "create answered no JSON: %s" % exc
        for obj in objs:
            self.created.append({"kind": obj.get("kind"), "name": ko.name_of(obj), "test": test})
        return objs, None

    def get(self, kind, name):
        """(object, gone, why) of one named object."""
        res = self.k.run(["get", kind, name, "-o", "json"])
        if res.rc == 0:
            try:
                return json.loads(res.stdout), False, None
            except ValueError as exc:
                return None, False, "not JSON: %s" % exc
        return None, ko.not_found(res), why(res)

    def sleep(self):
        time.sleep(max(0.0, self.p["poll_s"]))

    # -----------------------------------------------------------------------------------------------------------
    def watch_pod(self, name, t0, until="ready"):
        """Poll one pod until Ready (or done for until="done"), failed, or ready_timeout_s. -> (last object,
        {scheduled, started, ready, done}: seconds since t0 by the probe's clock when first seen, None if not)."""
        seen = {"scheduled": None, "started": None, "ready": None, "done": None}
        last = None
        while True:
            obj, gone, err = self.get("pod", name)
            now = time.monotonic() - t0
            if obj is not None:
                last = obj
                st = ko.pod_state(obj)
                for key in seen:
                    if seen[key] is None and st[key]:
                        seen[key] = round(now, 3)
                if (until == "ready" and (st["ready"] or st["done"])) or (until == "done" and st["done"]):
                    return last, seen
            elif gone:
                self.errors.append("pod %s disappeared while watched (%s)" % (name, err))
                return last, seen
            if now > self.p["ready_timeout_s"]:
                return last, seen
            self.sleep()

    def delete_one(self, kind, name, test):
        """Delete one object and poll until it is gone -> seconds (probe clock), or None when stuck past
        delete_timeout_s (recorded with what holds it)."""
        t0 = time.monotonic()
        res = self.k.run(["delete", kind, name, "--wait=false"])
        if res.rc != 0 and not ko.not_found(res):
            self.errors.append("delete %s %s: %s" % (kind, name, why(res)))
        last = None
        while True:
            obj, gone, _ = self.get(kind, name)
            elapsed = time.monotonic() - t0
            if gone:
                return round(elapsed, 3)
            last = obj or last
            if elapsed > self.p["delete_timeout_s"]:
                stuck = dict(ko.stuck_object(last), test=test, asked=name, waited_s=round(elapsed, 3))
                stuck["kind"] = stuck["kind"] if last else kind
                self.stuck.append(stuck)
                return None
            self.sleep()

    def events_for(self, name):
        doc, err = self.k.json(["get", "events", "--field-selector", "involvedObject.name=%s" % name])
        if err:
            self.errors.append("events of %s: %s" % (name, err))
        return doc

    # -----------------------------------------------------------------------------------------------------------
    def churn(self):
        p, art = self.p, self.art
        cycles = []
        first = 0 if p["warmup"] else 1
        for i in range(first, p["churn_cycles"] + 1):
            warm = i == 0
            manifest = ko.pod_manifest(self.run_label, "churn", i, p["gpu_image"] if p["gpus_per_pod"] else
                                       p["image"], ko.gpu_command() if p["gpus_per_pod"] else ko.hold_command(),
                                       gpu_resource=p["gpu_resource"], gpus=p["gpus_per_pod"])
            t0 = time.monotonic()
            objs, err = self.create("churn-%d" % i, manifest, "churn")
            if err:
                cycles.append({"cycle": i, "warmup": warm, "outcome": "create failed: %s" % err})
                self.errors.append("churn cycle %d: create: %s" % (i, err))
                break
            name = ko.name_of(objs[0])
            last, seen = self.watch_pod(name, t0)
            st = ko.pod_state(last)
            cycle = {"cycle": i, "warmup": warm, "pod": name, "node": st["node"], "phase": st["phase"],
                     "probe": seen, "api": ko.pod_timeline(last) if last else {}}
            if st["ready"]:
                cycle["outcome"] = "ready"
            else:
                cycle["outcome"] = "not ready after %g s" % p["ready_timeout_s"] if not st["done"] else \
                    "ended %s before Ready" % st["phase"]
                cycle["pending"] = ko.pending_reasons([last] if last else [], {name: self.events_for(name)})
            if p["gpus_per_pod"]:
                node = self.nodes.get(st["node"])
                cycle["gpus"] = {"requested": p["gpus_per_pod"], "api": ko.gpus_requested(last, p["gpu_resource"]),
                                 "node_allocatable": ko.node_allocatable(node, p["gpu_resource"]) if node else None,
                                 "visible": None}
                if st["ready"] or st["started"]:
                    self.read_gpus(name, cycle["gpus"])
            cycle["delete_s"] = self.delete_one("pod", name, "churn")
            cycles.append(cycle)
            self.record_churn(cycle)
        art.facts["churn"] = cycles

    def read_gpus(self, name, gpus, wait_s=60.0):
        """The GPUs the pod's `nvidia-smi -L` listed, once its log says it finished (ko.GPUS_LISTED), with
        nvidia-smi's exit status; None with the reason when the log cannot be read, nvidia-smi did not finish within
        wait_s, or it is missing or failed in the container (listing_error: its exit status and what it said)."""
        deadline = time.monotonic() + min(wait_s, self.p["ready_timeout_s"])
        while True:
            res = self.k.run(["logs", name])
            if res.rc != 0:
                gpus["logs_error"] = why(res)
                return
            if ko.GPUS_LISTED in res.stdout:
                listing = ko.gpu_listing(res.stdout)
                gpus["visible"] = listing["visible"]
                if listing["exit"] is not None:
                    gpus["nvidia_smi_exit"] = listing["exit"]
                if listing["error"]:
                    gpus["listing_error"] = listing["error"]
                return
            if time.monotonic() > deadline:
                gpus["logs_error"] = "nvidia-smi -L did not finish within %g s (log: %r)" % (
                    min(wait_s, self.p["ready_timeout_s"]), res.stdout[-200:])
                return
            time.sleep(self.p["poll_s"])

    def record_churn(self, c):
        art, i = self.art, c["cycle"]
        if c["warmup"]:
            if c["probe"].get("ready") is not None:
                art.add("warmup_s", c["probe"]["ready"], "s", test="churn")
            return
        keys = (("schedule_s", "scheduled", "schedule_s"), ("start_s", "started", "start_s"),
                ("ready_s", "ready", "ready_s"))
        for metric, probe_key, api_key in keys:
            if c["probe"].get(probe_key) is not None:
                art.add(metric, c["probe"][probe_key], "s", test="churn", cycle=i, clock="probe")
            if (c.get("api") or {}).get(api_key) is not None:
                art.add(metric, c["api"][api_key], "s", test="churn", cycle=i, clock="api")
        art.add("pod_ready", 1 if c["outcome"] == "ready" else 0, "bool", test="churn", cycle=i)
        if c.get("delete_s") is not None:
            art.add("delete_s", c["delete_s"], "s", test="churn", cycle=i)
        gpus = c.get("gpus") or {}
        if gpus.get("visible") is not None:
            art.add("gpus_visible", gpus["visible"], "GPUs", test="churn", cycle=i)
        if c["outcome"] == "ready" and gpus:
            art.add("gpus_api", gpus["api"], "GPUs", test="churn", cycle=i)

    # -----------------------------------------------------------------------------------------------------------
    def sandbox(self):
        p, art = self.p, self.art
        batches = []
        for n in [int(b) for b in p["sandbox_batches"]]:
            pods = [ko.pod_manifest(self.run_label, "sandbox", n, p["image"], ko.hold_command(),
                                    cpu=p["sandbox_cpu"], memory=p["sandbox_memory"]) for _ in range(n)]
            t0 = time.monotonic()
            objs, err = self.create("sandbox-%d" % n, ko.batch_manifest(pods), "sandbox")
            if err:
                batches.append({"batch": n, "outcome": "create failed: %s" % err})
                self.errors.append("sandbox batch %d: create: %s" % (n, err))
                break
            names = [ko.name_of(o) for o in objs]
            selector = "%s,%s=sandbox,%s=%d" % (ko.run_selector(self.run_label), ko.LABEL_TEST, ko.LABEL_INDEX, n)
            ready_at, last = {}, {}
            while True:
                doc, err = self.k.json(["get", "pods", "-l", selector])
                now = round(time.monotonic() - t0, 3)
                for obj in ko.items(doc):
                    last[ko.name_of(obj)] = obj
                    if ko.pod_state(obj)["ready"] and ko.name_of(obj) not in ready_at:
                        ready_at[ko.name_of(obj)] = now
                if len(ready_at) >= len(names) or now > p["ready_timeout_s"]:
                    break
                self.sleep()
            pending = [last.get(nm) or {"metadata": {"name": nm}} for nm in names if nm not in ready_at]
            events = {ko.name_of(pod): self.events_for(ko.name_of(pod)) for pod in pending[:p["max_event_reads"]]}
            batch = {"batch": n, "pods": names, "ready": len(ready_at), "pending": len(pending),
                     "ready_s": [ready_at[nm] for nm in names if nm in ready_at],
                     "api_ready_s": [ko.pod_timeline(last[nm])["ready_s"] for nm in names if nm in last],
                     "pending_reasons": ko.pending_reasons(pending, events) if pending else None,
                     "events_read": len(events)}
            batch["teardown_s"] = self.teardown(selector, "sandbox")
            batches.append(batch)
            art.add("sandbox_requested", n, "pods", batch=n)
            art.add("sandbox_ready", len(ready_at), "pods", batch=n)
            art.add("sandbox_pending", len(pending), "pods", batch=n)
            for j, nm in enumerate(names):
                if nm in ready_at:
                    art.add("ready_s", ready_at[nm], "s", test="sandbox", batch=n, pod=j, clock="probe")
                api = ko.pod_timeline(last[nm])["ready_s"] if nm in last else None
                if api is not None:
                    art.add("ready_s", api, "s", test="sandbox", batch=n, pod=j, clock="api")
            if batch["teardown_s"] is not None:
                art.add("teardown_s", batch["teardown_s"], "s", test="sandbox", batch=n)
        art.facts["sandbox"] = batches

    def teardown(self, selector, test):
        """Delete a label selector's pods and poll until none is left -> seconds, or None (the ones left are
        stuck)."""
        t0 = time.monotonic()
        res = self.k.run(["delete", "pods", "-l", selector, "--wait=false"])
        if res.rc != 0:
            self.errors.append("delete pods -l %s: %s" % (selector, why(res)))
        while True:
            doc, err = self.k.json(["get", "pods", "-l", selector])
            elapsed = time.monotonic() - t0
            left = ko.items(doc)
            if doc is not None and not left:
                return round(elapsed, 3)
            if elapsed > self.p["delete_timeout_s"]:
                for obj in left:
                    self.stuck.append(dict(ko.stuck_object(obj), test=test, asked=selector,
                                           waited_s=round(elapsed, 3)))
                if err:
                    self.errors.append("teardown %s: %s" % (selector, err))
                return None
            self.sleep()

    # -----------------------------------------------------------------------------------------------------------
    def pvc(self):
        p, art = self.p, self.art
        cycles = []
        first = 0 if p["warmup"] else 1
        for i in range(first, p["pvc_cycles"] + 1):
            warm = i == 0
            t0 = time.monotonic()
            objs, err = self.create("pvc-%d" % i, ko.pvc_manifest(self.run_label, i, p["pvc_size"],
                                                                  p["storage_class"]), "pvc")
            if err:
                cycles.append({"cycle": i, "warmup": warm, "outcome": "create claim failed: %s" % err})
                self.errors.append("pvc cycle %d: create claim: %s" % (i, err))
                break
            claim = ko.name_of(objs[0])
            manifest = ko.pod_manifest(self.run_label, "pvc", i, p["image"], ko.pvc_writer_command(p["pvc_write_mb"]),
                                       claim=claim)
            objs, err = self.create("pvc-pod-%d" % i, manifest, "pvc")
            cycle = {"cycle": i, "warmup": warm, "claim": claim}
            if err:
                cycle["outcome"] = "create pod failed: %s" % err
                self.errors.append("pvc cycle %d: create pod: %s" % (i, err))
                self.delete_one("persistentvolumeclaim", claim, "pvc")
                cycles.append(cycle)
                break
            pod = ko.name_of(objs[0])
            last, seen = self.watch_pod(pod, t0, until="done")
            st = ko.pod_state(last)
            written = round(time.monotonic() - t0, 3)
            claim_obj, _, _ = self.get("persistentvolumeclaim", claim)
            cycle.update(pod=pod, node=st["node"], phase=st["phase"], probe=seen,
                         claim_phase=((claim_obj or {}).get("status") or {}).get("phase"),
                         outcome="written and fsynced" if st["succeeded"] else
                         ("pod %s" % st["phase"] if st["done"] else "not done after %g s" % p["ready_timeout_s"]))
            if not st["succeeded"]:
                cycle["pending"] = ko.pending_reasons([last] if last else [], {pod: self.events_for(pod)})
            t_del = time.monotonic()
            pod_gone = self.delete_one("pod", pod, "pvc")
            claim_gone = self.delete_one("persistentvolumeclaim", claim, "pvc")
            cycle["teardown_s"] = round(time.monotonic() - t_del, 3) if None not in (pod_gone, claim_gone) else None
            cycle["cycle_s"] = round(time.monotonic() - t0, 3) if cycle["teardown_s"] is not None else None
            cycle["write_s"] = written if st["succeeded"] else None
            cycles.append(cycle)
            if warm:
                if cycle["cycle_s"] is not None:
                    art.add("warmup_s", cycle["cycle_s"], "s", test="pvc")
                continue
            art.add("pvc_ok", 1 if st["succeeded"] else 0, "bool", cycle=i)
            for metric, key in (("pvc_cycle_s", "cycle_s"), ("pvc_write_s", "write_s"),
                                ("pvc_teardown_s", "teardown_s")):
                if cycle[key] is not None:
                    art.add(metric, cycle[key], "s", cycle=i)
        art.facts["pvc"] = cycles

    # -----------------------------------------------------------------------------------------------------------
    def inspect(self):
        """The NetworkOperator pattern and the DRA objects, cluster-wide; a resource type the server does not serve
        (no CRD, no DRA API) is None, a forbidden read is recorded as such."""
        reads, notes = {}, {}
        for key, args in (("pods", ["get", "pods", "-A"]),
                          ("nads", ["get", "network-attachment-definitions", "-A"]),
                          ("compute_domains", ["get", "computedomains.resource.nvidia.com", "-A"]),
                          ("claims", ["get", "resourceclaims", "-A"]),
                          ("slices", ["get", "resourceslices"]),
                          ("device_classes", ["get", "deviceclasses"])):
            doc, err = self.k.json(args, namespaced=False)
            reads[key] = doc
            if err:
                notes[key] = err
        nodes = list(self.nodes.values())
        net = ko.network_pattern(ko.items(reads["pods"]), nodes, ko.items(reads["nads"]), ko.items(reads["claims"]))
        net["read_errors"] = {k: v for k, v in notes.items() if k in ("pods", "nads")}
        dra = ko.dra_summary(reads["compute_domains"], reads["claims"], reads["slices"], reads["device_classes"])
        dra["read_errors"] = {k: v for k, v in notes.items() if k not in ("pods", "nads")}
        self.art.facts["network"], self.art.facts["dra"] = net, dra

    # -----------------------------------------------------------------------------------------------------------
    def cleanup(self):
        """Delete everything of this run by its label and read back what is left (after delete_timeout_s at most)."""
        plan = ko.cleanup_plan(self.run_label, self.p["namespace"])
        res = run_cmd(self.k.base + plan["delete"], timeout=self.k.timeout)
        if res.rc != 0:
            self.errors.append("cleanup delete: %s" % why(res))
        t0 = time.monotonic()
        left = None
        while True:
            res = run_cmd(self.k.base + plan["left"], timeout=self.k.timeout)
            if res.rc == 0:
                try:
                    left = ko.leftovers(json.loads(res.stdout))
                except ValueError:
                    left = None
            if left == [] or time.monotonic() - t0 > self.p["delete_timeout_s"]:
                break
            self.sleep()
        self.art.facts["left"] = left if left is not None else "unknown: %s" % why(res)
        if left is not None:
            self.art.add("left_objects", len(left), "objects")


def run(art, p, out_dir):
    kube = Kubectl(p)
    res = kube.run(["version"], namespaced=False)
    if res.missing:
        art.skip("kubectl not found (%s): the Kubernetes tests need kubectl and a kubeconfig" % p["kubectl"])
        return
    version = server_version(res.stdout)
    if res.rc != 0 or not version:
        art.skip("no Kubernetes API server answered kubectl version: %s" % why(res))
        return
    res = kube.run(["auth", "can-i", "create", "pods"])
    if res.rc != 0 or res.stdout.strip() != "yes":
        art.skip("not permitted to create pods in namespace %s (kubectl auth can-i create pods: %s)" % (
            p["namespace"], (res.stdout.strip() or why(res))))
        return
    r = Run(art, p, out_dir, kube)
    art.facts.update(server_version=version, namespace=p["namespace"], run_label="%s=%s" % (
        ko.LABEL_RUN, r.run_label), gpu_resource=p["gpu_resource"], gpus_per_pod=p["gpus_per_pod"],
                     created=r.created, stuck_deletes=r.stuck, errors=r.errors)
    nodes, err = kube.json(["get", "nodes"], namespaced=False)
    r.nodes = {ko.name_of(n): n for n in ko.items(nodes)}
    if err:
        r.errors.append("get nodes: %s" % err)
    else:
        art.facts["gpus_allocatable"] = {name: ko.node_allocatable(n, p["gpu_resource"]) for name, n in
                                         r.nodes.items()}
    try:
        if p["churn_cycles"] > 0:
            r.churn()
        if p["sandbox_batches"]:
            r.sandbox()
        if p["pvc_cycles"] > 0:
            r.pvc()
        if p["inspect_cluster"]:
            r.inspect()
    finally:
        r.cleanup()
        for test in TESTS:
            art.add("stuck_deletes", sum(1 for s in r.stuck if s.get("test") == test), "objects", test=test)
        art.facts["kubectl_calls"] = kube.calls
