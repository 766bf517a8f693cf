"""The Kubernetes half of the orchestration phase (probe k8s_pods, reports/phases/orchestration/kubernetes.py) on
recordings: no API server can run here, so the readings of API objects are tested on real `kubectl get -o json`
answers and scheduler messages (tests/fixtures/k8s, sources in its README), the manifests and the cleanup plan for
real, and the probe's run() end to end against tests/orchestration/kubectl_replay.py, which answers kubectl calls
from a transcript of those recordings (a churn cycle whose delete is stuck, a GPU pod left Pending with the
scheduler's reason, a sandbox batch half Pending, PVC cycles) and logs what the probe asked. The artifacts it
writes are then graded and rendered."""

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

from probes.artifact import Artifact, validate
from probes.cli import run_probe
from probes.common.device import count_smi_listed
from probes.orchestration import k8s_objects as ko
from probes.orchestration import k8s_pods
from reports import DATA_DIR
from reports.grading.rubric import load_rubric
from reports.load import run_of_artifacts as make_run
from reports.phases.orchestration import kubernetes as kg
from reports.phases.orchestration.common import distribution, percentile
from reports.render import markdown

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "k8s"
REPLAY = ROOT / "tests" / "orchestration" / "kubectl_replay.py"
TRANSCRIPT = FIX / "replay" / "transcript.json"
RUN_ID = "replay-run"
REPLAY_PARAMS = {"churn_cycles": 2, "sandbox_batches": [1, 2], "pvc_cycles": 1,
                 "ready_timeout_s": 3.0, "delete_timeout_s": 2.0, "poll_s": 0.05}


def load(name):
    return json.loads((FIX / name).read_text())


def check(cid):
    [found] = [c for c in load_rubric()["checks"] if c["id"] == cid]
    return found


def replay(tmp_path, params=None, run_id=RUN_ID, transcript=TRANSCRIPT, timeout=0):
    """Run the probe against the replay; (artifact, calls made, out dir). The probe's kubectl is a two-line wrapper
    that starts the replay with this interpreter (a `python3` found through a version manager's shim can take a
    third of a second to start, which the polling loops would count)."""
    state = tmp_path / "state"
    state.mkdir(parents=True, exist_ok=True)
    kubectl = tmp_path / "kubectl"
    kubectl.write_text('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, REPLAY))
    kubectl.chmod(0o755)
    params = dict({"kubectl": str(kubectl)}, **(params or {}))
    out = tmp_path / "out"
    env = {"KUBECTL_REPLAY_TRANSCRIPT": str(transcript), "KUBECTL_REPLAY_STATE": str(state)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        _, doc = run_probe("k8s_pods", str(out), run_id, "h1", params=dict(REPLAY_PARAMS, **params),
                           timeout=timeout)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    log = state / "calls.jsonl"
    calls = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return doc, calls, out


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    return replay(tmp_path_factory.mktemp("k8s"))


# ---------------------------------------------------------------------------------------------------------------
# readings of recorded API objects


def test_a_pods_timeline_comes_from_the_apis_own_timestamps():
    """kspan's recorded pod: created 16:22:15, scheduled the same second, container started 16:22:22, Ready 16:22:23."""
    ready = load("pod_px-8f6bk_ready.json")
    assert ko.pod_timeline(ready) == {"schedule_s": 0.0, "initialized_s": 0.0, "start_s": 7.0, "ready_s": 8.0}
    assert ko.pod_timeline(load("pod_px-8f6bk_created.json")) == {"schedule_s": None, "initialized_s": None,
                                                                  "start_s": None, "ready_s": None}
    # a pod that ran to completion started (terminated.startedAt) and was never Ready
    assert ko.pod_timeline(load("pod_completed.json"))["start_s"] == 1.0
    assert ko.pod_timeline(load("pod_completed.json"))["ready_s"] is None


def test_pod_states_along_a_recorded_lifecycle():
    created, scheduled, ready = (ko.pod_state(load("pod_px-8f6bk_%s.json" % s)) for s in ("created", "scheduled",
                                                                                         "ready"))
    assert (created["scheduled"], created["ready"], created["phase"]) == (False, False, "Pending")
    assert (scheduled["scheduled"], scheduled["node"], scheduled["started"]) == (True, "kind-control-plane", False)
    assert (ready["started"], ready["ready"], ready["done"]) == (True, True, False)
    done = ko.pod_state(load("pod_completed.json"))
    assert (done["done"], done["succeeded"], done["ready"]) == (True, True, False)
    assert ko.pod_state(load("pod_stuck_terminating.json"))["terminating"] is True
    unsched = ko.pod_state(load("pod_status_unschedulable_cpu.json"))
    assert unsched["scheduled"] is False
    assert unsched["reason"] == ("Unschedulable: 0/10 nodes are available: 10 node(s) didn't match node selector, 4 "
                                 "Insufficient cpu.")


@pytest.mark.parametrize("entry", json.loads((FIX / "scheduler_messages.json").read_text()),
                         ids=lambda e: e["source"])
def test_every_recorded_scheduler_message_parses_into_counted_reasons(entry):
    parsed = ko.parse_scheduler_message(entry["message"])
    # a count of nodes, or None for a reason of the pod itself
    assert parsed["reasons"] and all(n is None or (isinstance(n, int) and n > 0) for n in parsed["reasons"].values())
    assert not any("preemption" in r for r in parsed["reasons"])


def test_scheduler_messages_old_and_new():
    msgs = {e["source"]: e["message"] for e in json.loads((FIX / "scheduler_messages.json").read_text())}
    assert ko.parse_scheduler_message(msgs["NVIDIA/k8s-device-plugin#165"]) == {
        "nodes": 3, "reasons": {"insufficient nvidia.com/gpu": 3}}
    assert ko.parse_scheduler_message(msgs["NVIDIA/k8s-device-plugin#119"])["reasons"] == {
        "Insufficient nvidia.com/gpu": 1, "node(s) were unschedulable": 1}
    assert ko.parse_scheduler_message(msgs["k3s-io/k3s#8575"]) == {"nodes": 1,
                                                                   "reasons": {"Insufficient amd.com/gpu": 1}}
    # a reason of the pod with no node count (was: no reason at all, "Pending (no reason recorded)"), and a reason
    # holding ", " (was: cut there, "that the pod didn't tolerate" dropped)
    pvc = msgs["events dump of 2025-05-11 (search index stored copy 5780448954)"]
    assert ko.parse_scheduler_message(pvc) == {
        "nodes": 3, "reasons": {"pod has unbound immediate PersistentVolumeClaims": None}}
    taint = msgs["kubectl describe pod in a Kubernetes Q&A (search index stored copy 27508384968)"]
    assert ko.parse_scheduler_message(taint)["reasons"] == {
        "node(s) had taint {node-role.kubernetes.io/master: }, that the pod didn't tolerate": 1,
        "node(s) didn't match pod affinity/anti-affinity": 2,
        "node(s) didn't satisfy existing pods anti-affinity rules": 2}
    pod = load("pod_gpu_pending.json")
    event = dict(load("events_failed_scheduling_gpu.json")["items"][0], message=pvc)
    assert ko.pending_reasons([pod], {ko.name_of(pod): {"items": [event]}})["reasons"] == {
        "pod has unbound immediate PersistentVolumeClaims": 1}
    # before Kubernetes 1.10: predicates with their node counts in brackets
    assert ko.parse_scheduler_message(msgs["argoproj/argo-workflows#190"]) == {
        "nodes": None, "reasons": {"Insufficient cpu": 9, "Insufficient memory": 15, "MatchNodeSelector": 18}}


def test_an_init_container_that_cannot_start_is_the_pods_reason():
    """A scheduled pod whose injected init container cannot pull its image: its own container waits in
    PodInitializing, and kubectl shows the pod as Init:ImagePullBackOff. The reason read was "PodInitializing"."""
    pod = copy.deepcopy(load("pod_px-8f6bk_scheduled.json"))
    pod["spec"]["initContainers"] = [{"name": "istio-init", "image": "docker.io/istio/proxyv2:1.99.0"}]
    pod["status"]["initContainerStatuses"] = [{
        "name": "istio-init", "image": "docker.io/istio/proxyv2:1.99.0", "imageID": "", "ready": False,
        "restartCount": 0, "state": {"waiting": {
            "reason": "ImagePullBackOff", "message": 'Back-off pulling image "docker.io/istio/proxyv2:1.99.0"'}}}]
    pod["status"]["containerStatuses"] = [{
        "name": pod["spec"]["containers"][0]["name"], "image": pod["spec"]["containers"][0]["image"], "imageID": "",
        "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]
    assert ko.pod_state(pod)["reason"] == ('Init:ImagePullBackOff: Back-off pulling image '
                                          '"docker.io/istio/proxyv2:1.99.0"')
    assert ko.pending_reasons([pod], {})["reasons"] == {"Init:ImagePullBackOff": 1}
    failed = copy.deepcopy(pod)
    failed["status"]["initContainerStatuses"][0]["state"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
    assert ko.pod_state(failed)["reason"] == "Init:Error: init container istio-init exited 1"
    done = copy.deepcopy(pod)
    done["status"]["initContainerStatuses"][0]["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    assert ko.pod_state(done)["reason"] == "PodInitializing"


def test_pending_reasons_from_events_or_from_the_pods_condition():
    gpu_pod = load("pod_gpu_pending.json")
    events = load("events_failed_scheduling_gpu.json")
    got = ko.pending_reasons([gpu_pod], {ko.name_of(gpu_pod): events})
    assert got["reasons"] == {"Insufficient nvidia.com/gpu": 1}
    assert got["messages"][0].startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    # no events read: the PodScheduled=False message says it
    cpu = load("pod_status_unschedulable_cpu.json")
    assert ko.pending_reasons([cpu], {})["reasons"] == {"node(s) didn't match node selector": 1,
                                                        "Insufficient cpu": 1}
    # an old scheduler's event about another pod
    old = load("events_failed_scheduling_cpu.json")
    pod = {"metadata": {"name": "resource-test-bdfcd9f5-g8jq5"}}
    assert ko.pending_reasons([pod], {"resource-test-bdfcd9f5-g8jq5": old})["reasons"] == {
        "Insufficient cpu": 1, "Insufficient memory": 1, "PodToleratesNodeTaints": 1}
    # events of a pod that started normally carry no reason to wait
    started = load("events_scheduled_started.json")
    assert ko.scheduling_messages(started) == [] and ko.warning_reasons(started) == {}


def test_gpus_asked_allocatable_and_seen():
    assert ko.gpus_requested(load("pod_gpu_pending.json"), "nvidia.com/gpu") == 1
    assert ko.gpus_requested(load("pod_px-8f6bk_ready.json"), "nvidia.com/gpu") == 0
    nodes = {ko.name_of(n): n for n in ko.items(load("nodes.json"))}
    assert ko.node_allocatable(nodes["voice-node003-77-alma88"], "nvidia.com/gpu") == 70
    assert ko.node_allocatable(nodes["minikube"], "nvidia.com/gpu") == 0
    assert ko.visible_gpus((FIX / "nvidia-smi-L_1gpu.txt").read_text()) == 1
    assert ko.visible_gpus("") == 0
    # MIG: the devices under their GPU are what the container was given; a GPU without any is one device
    assert ko.visible_gpus(MIG_2) == 2
    assert count_smi_listed((MIG_2 + (FIX / "nvidia-smi-L_1gpu.txt").read_text()).splitlines()) == 3
    # the marker carries nvidia-smi's exit status; a marker without one (older pods) is read from the text alone
    listed = (FIX / "nvidia-smi-L_1gpu_listed.txt").read_text()
    assert ko.gpu_listing(listed) == {"visible": 1, "exit": 0, "error": None}
    assert ko.gpu_listing(listed.replace(" exit=0", "")) == {"visible": 1, "exit": None, "error": None}
    assert ko.gpu_listing("sh: 1: nvidia-smi: not found\n%s\n" % ko.GPUS_LISTED) == {
        "visible": None, "exit": None, "error": "nvidia-smi -L listed no GPU: sh: 1: nvidia-smi: not found"}


def test_a_stuck_delete_names_what_holds_it():
    plain = ko.stuck_object(load("pod_stuck_terminating.json"))
    assert plain["deletion_timestamp"] == "2021-05-12T09:35:05Z" and plain["grace_s"] == 30
    assert plain["finalizers"] == []
    held = ko.stuck_object(load("pod_stuck_finalizer.json"))
    assert held["finalizers"] == ["foregroundDeletion"] and held["grace_s"] == 0
    # the excerpt shows the pod's generateName, not its name (cut off after managedFields)
    left = ko.leftovers({"kind": "List", "items": [load("pod_stuck_finalizer.json"), load("pvc_bound.json")]})
    assert left == [{"kind": "Pod", "name": None, "terminating": True, "finalizers": ["foregroundDeletion"],
                     "phase": None},
                    {"kind": "PersistentVolumeClaim", "name": "jenkins-jobs", "terminating": False, "finalizers": [],
                     "phase": "Bound"}]


def test_network_operator_patterns_from_the_operators_own_test_pods():
    pods = ko.items(load("pods_network_operator.json"))
    net = ko.network_pattern(pods, ko.items(load("nodes.json")), ko.items(load("nads.json")),
                             ko.items(load("resourceclaims.json")))
    assert net["patterns"] == ["gke_dranet", "macvlan", "rdma_shared_device", "sriov_host_device", "sriov_ib",
                               "sriov_legacy"]
    assert net["evidence"]["sriov_host_device"] == ["nvidia.com/hostdev (pod hostdev-test-pod)"]
    assert net["evidence"]["sriov_legacy"] == [
        "nvidia.com/sriov_resource (pod sriov-test-pod, networks sriov-rdma-network)"]
    assert net["networks"]["macvlan-test-pod"] == "macvlan-network"
    # a GPU is not a NIC, and nothing recognised is an empty answer
    assert ko.network_pattern([load("pod_gpu_pending.json")], [], [])["patterns"] == []


def test_dra_and_compute_domains_are_reported_as_they_exist():
    dra = ko.dra_summary(load("computedomains.json"), load("resourceclaims.json"), None, None)
    assert dra["compute_domains"] == [{"name": "inference-cd", "namespace": "default", "num_nodes": 2,
                                       "status": "not reported", "nodes": []}]
    assert dra["claims"] == {"dra.net": 1, "gpu.nvidia.com": 1} and dra["claims_total"] == 1
    assert dra["slices"] is None and dra["device_classes"] is None
    assert ko.dra_summary()["compute_domains"] is None


def test_server_version_of_both_kubectl_formats():
    assert k8s_pods.server_version((FIX / "kubectl_version.txt").read_text()) == "v1.30.0"
    assert k8s_pods.server_version((FIX / "kubectl_version_v1.17.txt").read_text()) == "v1.17.9"
    assert k8s_pods.server_version("Client Version: v1.30.3\n") is None


# ---------------------------------------------------------------------------------------------------------------
# manifests and cleanup planning (no server needed)


def test_manifests_carry_the_run_label_and_ask_for_what_the_test_needs():
    gpu = ko.pod_manifest("r1", "churn", 3, "cuda", ko.gpu_command(), gpu_resource="nvidia.com/gpu", gpus=2)
    meta = gpu["metadata"]
    assert meta["labels"] == {ko.LABEL_RUN: "r1", ko.LABEL_TEST: "churn", ko.LABEL_INDEX: "3"}
    assert meta["generateName"] == "cmx-churn-3-" and "name" not in meta
    c = gpu["spec"]["containers"][0]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert c["command"][-1].startswith("nvidia-smi -L;")
    assert gpu["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert gpu["spec"]["restartPolicy"] == "Never"
    sandbox = ko.pod_manifest("r1", "sandbox", 4, "busybox", ["sleep", "1"], cpu="100m", memory="64Mi")
    assert sandbox["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                             "limits": {"cpu": "100m", "memory": "64Mi"}}
    assert "tolerations" not in sandbox["spec"]
    batch = ko.batch_manifest([sandbox] * 4)
    assert batch["kind"] == "List" and len(batch["items"]) == 4
    pvc = ko.pvc_manifest("r1", 1, "1Gi", "fast")
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                           "storageClassName": "fast"}
    assert "storageClassName" not in ko.pvc_manifest("r1", 1, "1Gi")["spec"]
    writer = ko.pod_manifest("r1", "pvc", 1, "busybox", ko.pvc_writer_command(8), claim="cmx-pvc-1-abcde")
    assert writer["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "cmx-pvc-1-abcde"}}]
    assert "conv=fsync" in writer["spec"]["containers"][0]["command"][-1]
    for m in (gpu, sandbox, pvc, writer):
        assert m["metadata"]["labels"][ko.LABEL_RUN] == "r1"


def test_label_values_the_api_accepts():
    assert ko.label_value("20261203T002411Z") == "20261203T002411Z"
    assert ko.label_value("run id/with spaces:and+more") == "run-id-with-spaces-and-more"
    assert ko.label_value("-x-" * 40) == ("-x-" * 40)[1:62].rstrip("-")
    assert len(ko.label_value("a" * 100)) == 63 and ko.label_value("///") == "run"


def test_cleanup_plan_deletes_and_reads_back_by_the_run_label():
    plan = ko.cleanup_plan("r1", "team-a")
    assert plan["delete"] == ["delete", "pods,persistentvolumeclaims", "-l", "clustermax.assess/run=r1", "-n",
                              "team-a", "--wait=false", "--ignore-not-found"]
    assert plan["left"] == ["get", "pods,persistentvolumeclaims", "-l", "clustermax.assess/run=r1", "-n", "team-a",
                            "-o", "json"]


# ---------------------------------------------------------------------------------------------------------------
# the probe end to end against the replay


def test_the_replay_run_writes_a_valid_artifact_and_asks_only_recorded_calls(replayed):
    doc, calls, out = replayed
    assert validate(doc) == [] and doc["status"] == "ok", doc.get("reason")
    assert [c["key"] for c in calls if not c["answered"]] == []
    keys = [c["key"] for c in calls]
    assert keys[:3] == ["version", "auth can-i create pods -n default", "get nodes -o json"]
    # everything it created carries the run's label: the manifests it sent are beside the artifact
    for name in doc["raw"]:
        sent = json.loads((out / name).read_text())
        for obj in ko.items(sent):
            assert obj["metadata"]["labels"][ko.LABEL_RUN] == RUN_ID
    # and the cleanup by that label ran last, then read what was left until the delete timeout (a pod stays)
    last = keys.index("delete pods,persistentvolumeclaims -l clustermax.assess/run=replay-run -n default "
                      "--wait=false --ignore-not-found")
    assert set(keys[last + 1:]) == {"get pods,persistentvolumeclaims -l clustermax.assess/run=replay-run -n "
                                    "default -o json"} and len(keys[last + 1:]) > 1
    assert doc["facts"]["server_version"] == "v1.30.0"


def _results(doc, metric, **labels):
    return [r["value"] for r in doc["results"] if r["metric"] == metric and all(
        r["labels"].get(k) == v for k, v in labels.items())]


def test_the_replay_churn(replayed):
    doc, _, _ = replayed
    churn = doc["facts"]["churn"]
    assert [(c["cycle"], c["warmup"], c["outcome"]) for c in churn] == [
        (0, True, "ready"), (1, False, "ready"), (2, False, "not ready after 3 s")]
    # the API clock: kspan's pod was Ready 8 s after creation, its container started after 7 s
    assert _results(doc, "ready_s", test="churn", cycle=1, clock="api") == [8.0]
    assert _results(doc, "start_s", test="churn", cycle=1, clock="api") == [7.0]
    assert len(_results(doc, "ready_s", test="churn", cycle=1, clock="probe")) == 1
    assert _results(doc, "warmup_s", test="churn") and not _results(doc, "ready_s", test="churn", cycle=0)
    # GPUs: the container lists one (nvidia-smi -L), the recorded pod spec holds none (a CPU pod's recording)
    assert churn[1]["gpus"] == {"requested": 1, "api": 0, "node_allocatable": None, "visible": 1, "nvidia_smi_exit": 0}
    assert churn[2]["pending"]["reasons"] == {"Insufficient nvidia.com/gpu": 1}
    assert _results(doc, "pod_ready", test="churn") == [1, 0]
    # cycle 1's delete never finished: the API kept answering with a pod that has a deletionTimestamp
    assert churn[1]["delete_s"] is None and churn[2]["delete_s"] is not None
    stuck = doc["facts"]["stuck_deletes"]
    assert len(stuck) == 1 and stuck[0]["asked"] == "px-5f87d8856c-c29hj"
    assert stuck[0]["deletion_timestamp"] == "2021-05-12T09:35:05Z" and stuck[0]["test"] == "churn"
    assert _results(doc, "stuck_deletes", test="churn") == [1]


def test_the_replay_sandbox_batches(replayed):
    doc, _, _ = replayed
    batches = doc["facts"]["sandbox"]
    assert [(b["batch"], b["ready"], b["pending"]) for b in batches] == [(1, 1, 0), (2, 1, 1)]
    assert batches[1]["pending_reasons"]["reasons"] == {"Insufficient nvidia.com/gpu": 1}
    assert batches[0]["teardown_s"] is not None and batches[1]["teardown_s"] is not None
    assert _results(doc, "sandbox_ready", batch=2) == [1] and _results(doc, "sandbox_requested", batch=2) == [2]


def test_the_replay_pvc_cycles_and_what_the_cluster_offers(replayed):
    doc, _, _ = replayed
    pvc = doc["facts"]["pvc"]
    assert [(c["cycle"], c["outcome"], c["claim_phase"]) for c in pvc] == [
        (0, "written and fsynced", "Bound"), (1, "written and fsynced", "Bound")]
    assert _results(doc, "pvc_ok", cycle=1) == [1] and len(_results(doc, "pvc_cycle_s", cycle=1)) == 1
    assert not _results(doc, "pvc_cycle_s", cycle=0)
    assert "sriov_host_device" in doc["facts"]["network"]["patterns"]
    dra = doc["facts"]["dra"]
    assert dra["compute_domains"][0]["name"] == "inference-cd"
    assert dra["read_errors"]["slices"] == 'error: the server doesn\'t have a resource type "resourceslices"'
    # what was created and what was left
    created = doc["facts"]["created"]
    assert {"kind": "PersistentVolumeClaim", "name": "jenkins-jobs", "test": "pvc"} in created
    assert doc["facts"]["left"] == [{"kind": "Pod", "name": "client21-cali-ns-0-bb6cb6fc6-w8f9w",
                                     "terminating": True, "finalizers": [], "phase": None}]
    assert _results(doc, "left_objects") == [1]


def test_cleanup_runs_when_the_probe_is_stopped_midway(tmp_path):
    """Stopped by its time limit while a GPU pod waits for a node: the finally still deletes by label and reads back."""
    doc, calls, _ = replay(tmp_path, params={"ready_timeout_s": 30}, timeout=4)
    assert doc["status"] == "error" and doc["reason"].startswith("timed out")
    keys = [c["key"] for c in calls]
    assert any(k.startswith("delete pods,persistentvolumeclaims -l clustermax.assess/run=replay-run") for k in keys)
    assert doc["facts"]["left"] and validate(doc) == []


def _mini_transcript(tmp_path, entries):
    path = tmp_path / "transcript.json"
    path.write_text(json.dumps({"fixtures": str(FIX), "entries": entries}))
    return path


def test_skips_without_kubectl_a_server_or_the_right_to_create_pods(tmp_path):
    doc, _, _ = replay(tmp_path / "a", params={"kubectl": str(tmp_path / "no-such-kubectl")})
    assert doc["status"] == "skipped" and doc["reason"].startswith("kubectl not found")
    (tmp_path / "b").mkdir()
    refused = "The connection to the server localhost:8080 was refused - did you specify the right host or port?\n"
    t = _mini_transcript(tmp_path / "b", [{"argv": "version", "responses": [
        {"stdout": "Client Version: v1.30.3\nKustomize Version: v5.0.4-0.20230601165947-6ce0bf390ce3\n",
         "stderr": refused, "rc": 1}]}])
    doc, _, _ = replay(tmp_path / "b", transcript=t)
    assert doc["status"] == "skipped" and "connection to the server localhost:8080 was refused" in doc["reason"]
    (tmp_path / "c").mkdir()
    t = _mini_transcript(tmp_path / "c", [{"argv": "version", "responses": [{"file": "kubectl_version.txt"}]},
                                          {"argv": "auth can-i create pods -n default",
                                           "responses": [{"stdout": "no\n", "rc": 1}]}])
    doc, calls, _ = replay(tmp_path / "c", transcript=t)
    assert doc["status"] == "skipped" and doc["reason"] == (
        "not permitted to create pods in namespace default (kubectl auth can-i create pods: no)")
    assert len(calls) == 2  # nothing created, nothing to clean


# ---------------------------------------------------------------------------------------------------------------
# grading and the report


def _rows(kind, cid, run, host="h1"):
    return kg.CLUSTER[kind](check(cid), run, [host])


def test_the_rubric_entries_are_valid_and_their_kinds_exist():
    schema = json.loads((Path(DATA_DIR) / "schemas" / "rubric.schema.json").read_text())
    entries = [check(cid) for cid in ("orchestration.k8s.ran", "orchestration.k8s_gpu_pod_churn",
                                      "orchestration.k8s_sandbox_pods", "orchestration.k8s_pvc_lifecycle",
                                      "orchestration.k8s_stuck_deletes", "orchestration.k8s_network_pattern",
                                      "orchestration.k8s_dra")]
    jsonschema.validate({"schema": "clustermax.assess/rubric/v1", "checks": entries}, schema)
    for c in entries[1:]:
        assert c["kind"] in kg.CLUSTER and c["source"]


def test_grading_the_replayed_artifact(replayed):
    doc, _, _ = replayed
    run = make_run([doc])
    churn = _rows("k8s_churn", "orchestration.k8s_gpu_pod_churn", run)
    assert [r["status"] for r in churn] == ["fail"]
    assert churn[0]["observed"].startswith("1 of 2 cycles Ready; start p50")
    assert "cycle 2 not ready after 3 s (Insufficient nvidia.com/gpu (1 pod))" in churn[0]["reason"]
    assert "cycle 1: the API records 0 GPU(s) for the pod, 1 asked" in churn[0]["reason"]
    sandbox = _rows("k8s_sandbox", "orchestration.k8s_sandbox_pods", run)
    assert [(r["subject"], r["status"]) for r in sandbox] == [("batch 1", "pass"), ("batch 2", "fail")]
    assert sandbox[1]["reason"] == "Pending: Insufficient nvidia.com/gpu (1 pod)"
    pvc = _rows("k8s_pvc", "orchestration.k8s_pvc_lifecycle", run)
    assert [r["status"] for r in pvc] == ["pass"] and pvc[0]["observed"].startswith("1 of 1 cycles wrote")
    stuck = _rows("k8s_stuck_deletes", "orchestration.k8s_stuck_deletes", run)
    assert stuck[0]["status"] == "fail" and stuck[0]["observed"] == "1 stuck delete(s); 1 left"
    assert "Pod client21-cali-ns-0-bb6cb6fc6-w8f9w (churn test)" in stuck[0]["reason"]
    net = _rows("k8s_network_pattern", "orchestration.k8s_network_pattern", run)
    assert net[0]["status"] == "pass" and "rdma_shared_device" in net[0]["observed"]
    dra = _rows("k8s_dra", "orchestration.k8s_dra", run)
    assert dra[0]["observed"].startswith("1 ComputeDomain(s): default/inference-cd (2 nodes, not reported)")


# ---------------------------------------------------------------------------------------------------------------
# GPUs seen in a churn pod: the pod's own command run here under /bin/sh, with a stand-in nvidia-smi that prints a
# recorded `nvidia-smi -L` and exits as nvidia-smi does (or none at all), read back by the probe and graded

SMI_FIX = ROOT / "tests" / "fixtures" / "tools" / "nvidia-smi"
# `nvidia-smi -L` of an A100 80GB PCIe with two MIG devices, NVIDIA/nvidia-container-toolkit#203 (greenmoss,
# 2024-01-08): what a container given two MIG devices of one GPU lists (the parent GPU, then one line per device)
MIG_2 = ("GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39)\n"
         "  MIG 3g.40gb     Device  0: (UUID: MIG-0929581a-2be6-5dec-bf34-0954c6c529a6)\n"
         "  MIG 3g.40gb     Device  1: (UUID: MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23)\n")


def _pod_log(tmp_path, listing=None, status=0):
    """What `kubectl logs` returns for a churn pod (both streams of its container): ko.gpu_command run by dash (the
    Ubuntu-based CUDA image's sh) with a PATH holding only sleep and cat and, when listing is given, an nvidia-smi
    that prints it and exits with status; without one the shell reports nvidia-smi missing, as in a container the
    NVIDIA runtime did not set up (an amd.com/gpu node, Azure/AKS#1271: "sh: 27: nvidia-smi: not found")."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("sleep", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    if listing is not None:
        (tmp_path / "listing.txt").write_text(listing)
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\ncat '%s'\nexit %d\n" % (tmp_path / "listing.txt", status))
        smi.chmod(0o755)
    out = subprocess.run(ko.gpu_command(hold_s=0), executable="/bin/sh", env={"PATH": str(bin_dir)},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    return out.stdout


class _Logs:
    """kubectl answering `logs` with the container's log."""

    def __init__(self, log):
        self.log = log

    def run(self, args, namespaced=True, timeout=None):
        assert args[0] == "logs"
        return SimpleNamespace(rc=0, stdout=self.log, stderr="", missing=False, timed_out=False)


def _seen(log, n):
    """The probe's reading of the pod's log (Run.read_gpus), as the churn cycle records it."""
    gpus = {"requested": n, "api": n, "node_allocatable": 7, "visible": None}
    k8s_pods.Run(Artifact("k8s_pods", "r", "h1"), {"ready_timeout_s": 3.0, "poll_s": 0.05}, ".",
                 _Logs(log)).read_gpus("cmx-churn-1-abcde", gpus)
    return gpus


def _churn_row(gpus, resource):
    art = Artifact("k8s_pods", "r", "h1")
    art.facts.update(gpu_resource=resource, gpus_per_pod=gpus["requested"], churn=[
        {"cycle": i, "warmup": False, "pod": "cmx-churn-%d" % i, "node": "n1", "outcome": "ready",
         "probe": {"scheduled": 0.1, "started": 1.0, "ready": 1.2}, "api": {}, "gpus": dict(gpus), "delete_s": 1.0}
        for i in (1, 2)])
    for i in (1, 2):
        art.add("start_s", 1.0, "s", test="churn", cycle=i, clock="probe")
    [row] = _rows("k8s_churn", "orchestration.k8s_gpu_pod_churn", make_run([art.to_dict()]))
    return row


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "amd.com/gpu"])
def test_churn_gpus_unknown_when_the_container_has_no_nvidia_smi(tmp_path, resource):
    log = _pod_log(tmp_path)
    assert "nvidia-smi: not found" in log
    gpus = _seen(log, 1)
    row = _churn_row(gpus, resource)
    assert (row["status"], row["reason"]) == ("warn", "; ".join(
        "cycle %d: GPUs seen in the container unknown (nvidia-smi -L exit 127: sh: 1: nvidia-smi: not found)" % i
        for i in (1, 2)))
    # the artifact keeps why: nvidia-smi's exit status and what the log said
    assert gpus["visible"] is None and gpus["nvidia_smi_exit"] == 127
    assert gpus["listing_error"] == "nvidia-smi -L exit 127: sh: 1: nvidia-smi: not found"


def test_churn_gpus_unknown_when_nvidia_smi_cannot_reach_the_driver(tmp_path):
    """nvidia-smi present but failing (exit 9, NVIDIA driver not loaded): a recorded message, no count."""
    msg = (ROOT / "tests" / "fixtures" / "nvidia-smi" / "driver_not_loaded.txt").read_text()
    gpus = _seen(_pod_log(tmp_path, msg, status=9), 1)
    assert _churn_row(gpus, "nvidia.com/gpu")["status"] == "warn"
    assert gpus["visible"] is None and gpus["nvidia_smi_exit"] == 9
    assert gpus["listing_error"].startswith("nvidia-smi -L exit 9: NVIDIA-SMI has failed because it couldn't "
                                            "communicate with the NVIDIA driver.")


@pytest.mark.parametrize("resource", ["nvidia.com/mig-3g.40gb", "nvidia.com/gpu"])
def test_churn_two_mig_slices_of_one_gpu_are_two_gpus(tmp_path, resource):
    """Two MIG devices asked (mixed strategy by profile, or nvidia.com/gpu under the "single" strategy), two given."""
    gpus = _seen(_pod_log(tmp_path, MIG_2), 2)
    row = _churn_row(gpus, resource)
    assert row["status"] == "pass" and not row["reason"], row
    assert gpus["visible"] == 2
    # one MIG device given of the two asked is one
    one = _seen(_pod_log(tmp_path / "one", MIG_2.rsplit("  MIG", 1)[0]), 2)
    assert one["visible"] == 1
    assert "the container saw 1 GPU(s), asked 2" in _churn_row(one, resource)["reason"]


def test_churn_one_full_gpu_asked_one_still_passes(tmp_path):
    gpus = _seen(_pod_log(tmp_path, (FIX / "nvidia-smi-L_1gpu.txt").read_text()), 1)
    assert gpus["visible"] == 1 and "listing_error" not in gpus
    assert _churn_row(gpus, "nvidia.com/gpu")["status"] == "pass"


@pytest.mark.parametrize("listing,status", [
    ((SMI_FIX / "error_no-devices-found.txt").read_text(), 6),  # NVML answered: no device in the container
    ("", 0)])  # nvidia-smi ran, listed nothing and succeeded
def test_churn_zero_gpus_listed_by_nvidia_smi_still_fails(tmp_path, listing, status):
    gpus = _seen(_pod_log(tmp_path, listing, status), 1)
    assert gpus["visible"] == 0, gpus
    row = _churn_row(gpus, "nvidia.com/gpu")
    assert row["status"] == "fail"
    assert "cycle 1: the container saw 0 GPU(s), asked 1" in row["reason"]


def test_latency_thresholds_and_percentiles():
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([5], 90) == 5 and percentile([], 50) is None
    assert percentile(list(range(1, 11)), 90) == pytest.approx(9.1)
    c = check("orchestration.k8s_gpu_pod_churn")
    assert kg._latency(c, distribution([1, 2, 3]), "start")[0] == "pass"
    assert kg._latency(c, distribution([1, 2, 30]), "start")[0] == "fail"
    assert kg._latency(c, distribution([7, 7, 7]), "start")[0] == "warn"


def test_ready_and_cycle_times_just_over_their_lines_are_shown_over_them(replayed):
    """Sandbox batch 1's pod Ready after 6.004 s and the PVC cycle taking 60.04 s: both warn (p90 <= 6 s, <= 60 s),
    and both were shown as "6" and "60" (3 significant digits) in the rows and the section's tables; each keeps its
    side of the line now (reports/shown.py)."""
    from reports.phases.orchestration import section

    doc = copy.deepcopy(replayed[0])
    doc["facts"]["sandbox"][0]["ready_s"] = [6.004]
    for r in doc["results"]:
        if r["metric"] == "pvc_cycle_s":
            r["value"] = 60.04
    run = make_run([doc])
    sandbox = _rows("k8s_sandbox", "orchestration.k8s_sandbox_pods", run)
    assert (sandbox[0]["status"], sandbox[0]["observed"]) == (
        "warn", "1 of 1 Ready; ready p50 6.004 s, p90 6.004 s, max 6.004 s (n=1)")
    [pvc] = _rows("k8s_pvc", "orchestration.k8s_pvc_lifecycle", run)
    assert (pvc["status"], pvc["observed"]) == (
        "warn", "1 of 1 cycles wrote and fsynced; cycle p50 60.04 s, p90 60.04 s, max 60.04 s (n=1)")
    md = markdown.render(section.blocks(run, [], None))
    assert "| pvc | cycle | 1 | 60.04 | 60.04 | 60.04 | – |" in md, md
    assert "| 1 | 1 | 0 | 6.004 | 6.004 |" in md


def test_a_skipped_artifact_is_a_skip_with_its_reason_for_every_kind():
    art = Artifact("k8s_pods", "r", "h1")
    art.skip("kubectl not found (kubectl): the Kubernetes tests need kubectl and a kubeconfig")
    run = make_run([art.to_dict()])
    for kind, cid in (("k8s_churn", "orchestration.k8s_gpu_pod_churn"),
                      ("k8s_sandbox", "orchestration.k8s_sandbox_pods"),
                      ("k8s_pvc", "orchestration.k8s_pvc_lifecycle"),
                      ("k8s_stuck_deletes", "orchestration.k8s_stuck_deletes"),
                      ("k8s_network_pattern", "orchestration.k8s_network_pattern"),
                      ("k8s_dra", "orchestration.k8s_dra")):
        rows = _rows(kind, cid, run)
        assert [(r["status"], r["reason"]) for r in rows] == [("skip", art.reason)], kind


def test_cluster_variant_puts_the_rows_on_the_host_that_ran_the_probe(replayed):
    doc, _, _ = replayed
    other = Artifact("slurm_jobs", "r", "h2")
    other.skip("no Slurm")
    run = make_run([doc, other.to_dict()])
    c = check("orchestration.k8s_pvc_lifecycle")
    assert [r["host"] for r in kg.CLUSTER["k8s_pvc"](c, run, run.hosts)] == ["h1"]
    # No host ran it: every host's skip row says why.
    alone = make_run([other.to_dict()])
    assert [(r["host"], r["status"]) for r in kg.CLUSTER["k8s_pvc"](c, alone, alone.hosts)] == [("h2", "skip")]


def test_the_report_blocks_render(replayed):
    doc, _, _ = replayed
    run = make_run([doc])
    rows = [r for kind, cid in (("k8s_churn", "orchestration.k8s_gpu_pod_churn"),
                                ("k8s_sandbox", "orchestration.k8s_sandbox_pods")) for r in _rows(kind, cid, run)]
    text = markdown.render(kg.blocks(run, rows, None))
    for expected in ("### Kubernetes", "Sandbox pods: Ready against batch size", "Insufficient nvidia.com/gpu (1 pod)",
                     "client21-cali-ns-0-bb6cb6fc6-w8f9w", "sriov_host_device", "inference-cd",
                     "Kubernetes checks: 1 pass, 2 fail"):
        assert expected in text, expected
    assert kg.blocks(make_run([Artifact("slurm_jobs", "r", "h1").to_dict()]), [], None) == []


def test_the_replayer_answers_in_order_switches_after_a_call_and_logs_what_it_could_not_answer(tmp_path):
    t = _mini_transcript(tmp_path, [
        {"argv": "get pod p -o json", "responses": [{"stdout": "1"}, {"stdout": "2"}]},
        {"argv": "get pod p -o json", "when": [["delete pod p", 1]], "responses": [{"stderr": "gone", "rc": 1}]},
        {"argv": "delete pod p", "responses": [{"stdout": "deleted"}]}])
    env = dict(os.environ, KUBECTL_REPLAY_TRANSCRIPT=str(t), KUBECTL_REPLAY_STATE=str(tmp_path))

    def call(*argv):
        res = subprocess.run([sys.executable, str(REPLAY), *argv], env=env, capture_output=True, text=True)
        return res.returncode, res.stdout + res.stderr

    got = [call("get", "pod", "p", "-o", "json") for _ in range(3)]
    assert got == [(0, "1"), (0, "2"), (0, "2")]  # in order, the last one again
    assert call("delete", "pod", "p") == (0, "deleted")
    assert call("get", "pod", "p", "-o", "json") == (1, "gone")
    rc, text = call("get", "nodes", "-f", str(t))
    assert rc == 1 and text == "kubectl_replay: no recorded response for: get nodes -f @transcript.json\n"
    log = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c["answered"] for c in log] == [True] * 5 + [False]


def test_churn_a_gpu_lost_in_the_container_fails_with_what_nvidia_smi_said(tmp_path):
    """A pod given two GPUs, one of them fallen off the bus: nvidia-smi prints the driver's line for it (as recorded
    on a node with GPU 1 lost, driver 610.57: "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown
    Error", index file id 61292000755), lists the other and exits non-zero (15, NVML's "GPU is lost"). The container
    saw one GPU of two: a fail, not the unknown count of a container without nvidia-smi."""
    lost = "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error"
    listing = "%s\nGPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-f7b02328-d6fe-5b1f-9683-150416809000)\n" % lost
    gpus = _seen(_pod_log(tmp_path, listing, 15), 2)
    assert (gpus["visible"], gpus["nvidia_smi_exit"]) == (1, 15)
    row = _churn_row(gpus, "nvidia.com/gpu")
    assert row["status"] == "fail"
    assert "cycle 1: the container saw 1 GPU(s), asked 2 (nvidia-smi -L exit 15: %s)" % lost in row["reason"]
