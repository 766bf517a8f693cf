"""The profile a run reached, from what its artifacts record (reports/profiles.py, tiers.yml `profiles`,
docs/ratings.md "Profile"): the sizes the soaks record, every host the burn-in phase ran on, and the burn-in's time
under load. Runs are written as run directories like a standard run's (rating_runs.standard_durations) and changed
the way a cut-down or faulted run leaves them."""

import json
import shutil

from rating_runs import MODEL, soak_artifact, standard_durations, storage_soak, summarized_burnin

from probes.artifact import Artifact, write_json_atomic
from reports import profiles
from reports.load import load_run
from reports.rate import load_tiers

SPEC = load_tiers()["profiles"]
HOSTS = ["n1", "n2", "n3", "n4"]


def standard_run(tmp_path, hosts=HOSTS, journal=()):
    """A run declared standard whose soaks, sweep and checkpoint recorded the standard profile's durations and sizes
    on every host."""
    run_dir = tmp_path / "run"
    (run_dir / "artifacts").mkdir(parents=True)
    (run_dir / "assess_run.json").write_text(json.dumps({"id": "r1", "provider": "p", "profile": "standard",
                                                         "hosts": list(hosts)}))
    for host in hosts:
        (run_dir / "artifacts" / host).mkdir()
        standard_durations(run_dir, host, "r1")
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(line) + "\n" for line in journal))
    return run_dir


def write(run_dir, art):
    write_json_atomic(str(run_dir / "artifacts" / art.host / ("%s.json" % art.probe)), art.to_dict())


def judged(run_dir):
    return profiles.assess(load_run(str(run_dir)), load_tiers())


def measure(verdict, mid):
    return next(m for m in verdict["measures"] if m["id"] == mid)


def test_a_standard_run_is_standard(tmp_path):
    verdict = judged(standard_run(tmp_path))
    assert verdict["rating"] == "standard" and verdict["lacks"] == []
    assert measure(verdict, "storage_soak_clients")["value"] == [1, 8, 32]
    assert measure(verdict, "burnin_gemm_size")["value"] == 8192
    assert measure(verdict, "burnin_message_bytes")["value"] == measure(verdict, "fabric_soak_message_bytes")[
        "value"] == 256 << 20


# ------------------------------------------------------------------------------------------------ recorded sizes

def test_sizes_cut_down_by_role_variables_are_a_screening_that_names_them(tmp_path):
    """The review's run: declared standard, with burnin_storage_clients: [1], burnin_fabric_size_bytes: 4096,
    burnin_coll_size_bytes: 4096 and burnin_gemm_size: 1024. The artifacts record every one of them; before, the
    profile read only durations and rated it standard."""
    run_dir = standard_run(tmp_path)
    for host in HOSTS:
        storage_soak(run_dir, host, "r1", clients=[1])
        write(run_dir, soak_artifact("fabric_soak", "r1", host, 902.1, 2.0, message_bytes=4096))
        write(run_dir, soak_artifact("burnin", "r1", host, 3603.4, 3.2, message_bytes=4096, gemm_size=1024))
    verdict = judged(run_dir)
    assert verdict["rating"] == "screening"
    assert verdict["lacks"] == [
        "storage soak client counts 1 on n1 (standard needs 1, 8, 32)",
        "burn-in GEMM size 1024 on n1 < 8192",
        "burn-in all-to-all message 4 KiB on n1 < 256 MiB",
        "fabric soak message 4 KiB on n1 < 256 MiB"]
    assert {m["id"]: m["state"] for m in verdict["measures"]} == {
        "burnin_s": "met", "fabric_soak_s": "met", "storage_soak_phase_s": "met", "fio_runtime_s": "met",
        "fio_size_mib": "met", "checkpoint_size_mib": "met", "storage_soak_clients": "below",
        "burnin_gemm_size": "below", "burnin_message_bytes": "below", "fabric_soak_message_bytes": "below"}
    assert "storage soak client counts 1, burn-in GEMM size 1024, burn-in all-to-all message 4 KiB, fabric soak " \
           "message 4 KiB" in profiles.ran_text(verdict)


def test_one_host_with_fewer_client_counts_bounds_the_run(tmp_path):
    run_dir = standard_run(tmp_path)
    storage_soak(run_dir, "n3", "r1", clients=[1, 8])
    verdict = judged(run_dir)
    clients = measure(verdict, "storage_soak_clients")
    assert (clients["value"], clients["host"]) == ([1, 8], "n3")
    assert clients["hosts"] == {"n1": [1, 8, 32], "n2": [1, 8, 32], "n3": [1, 8], "n4": [1, 8, 32]}
    assert verdict["lacks"] == ["storage soak client counts 1, 8 on n3 (standard needs 1, 8, 32)"]
    # more client counts than the profile's are more, not less
    storage_soak(run_dir, "n3", "r1", clients=[1, 2, 8, 32, 64])
    assert judged(run_dir)["rating"] == "standard"


def test_the_message_size_of_one_host_bounds_the_run(tmp_path):
    run_dir = standard_run(tmp_path)
    write(run_dir, soak_artifact("fabric_soak", "r1", "n2", 902.1, 2.0, message_bytes=64 << 20))
    verdict = judged(run_dir)
    assert verdict["lacks"] == ["fabric soak message 64 MiB on n2 < 256 MiB"]
    assert measure(verdict, "fabric_soak_message_bytes")["minimums"] == {"standard": 256 << 20, "full": 256 << 20}


def test_cpu_nodes_are_held_to_the_sizes_the_role_gives_the_cpu(tmp_path):
    """roles/burnin: burnin_gemm_size and the message sizes 0 = probes/burnin/runner.py's default, 8192 and 256 MiB
    on GPUs, 512 and 1 MiB on the CPU. A standard run on CPU nodes records the CPU's sizes and is not cut down; a CPU
    node given smaller ones is."""
    run_dir = standard_run(tmp_path)
    for host in HOSTS:
        for probe, elapsed, load_from in (("burnin", 3603.4, 3.2), ("fabric_soak", 902.1, 2.0)):
            art = soak_artifact(probe, "r1", host, elapsed, load_from, message_bytes=1 << 20, gemm_size=512)
            art.device.update(backend="cpu", model=None, count=0)
            write(run_dir, art)
    verdict = judged(run_dir)
    assert verdict["rating"] == "standard" and verdict["lacks"] == []
    gemm = measure(verdict, "burnin_gemm_size")
    assert gemm["value"] == 512 and gemm["minimums"] == {"standard": 512, "full": 512} and gemm["state"] == "met"
    art = soak_artifact("burnin", "r1", "n4", 3603.4, 3.2, message_bytes=1 << 20, gemm_size=128)
    art.device.update(backend="cpu", model=None, count=0)
    write(run_dir, art)
    assert judged(run_dir)["lacks"] == ["burn-in GEMM size 128 on n4 < 512"]


def test_a_gpu_node_beside_cpu_nodes_is_held_to_the_gpu_sizes(tmp_path):
    run_dir = standard_run(tmp_path)
    for host in ("n1", "n2", "n3"):
        art = soak_artifact("burnin", "r1", host, 3603.4, 3.2, message_bytes=1 << 20, gemm_size=512)
        art.device.update(backend="cpu", model=None, count=0)
        write(run_dir, art)
    write(run_dir, soak_artifact("burnin", "r1", "n4", 3603.4, 3.2, message_bytes=1 << 20, gemm_size=1024))
    verdict = judged(run_dir)
    assert verdict["lacks"] == ["burn-in GEMM size 1024 on n4 < 8192",
                                "burn-in all-to-all message 1 MiB on n4 < 256 MiB"]


# ------------------------------------------------------------------------------------------------ every host

def faulted_at_start(run_dir, host, probe="burnin"):
    """The artifact the start leaves when the runner could not start (status error, no result)."""
    art = Artifact(probe, "r1", host)
    art.device.update(backend="cuda", model=MODEL, count=8)
    art.error("start: OSError: [Errno 28] No space left on device")
    write(run_dir, art)


def test_a_burnin_that_faulted_on_three_hosts_did_not_run_there(tmp_path):
    """The review's run: the burn-in faulted at its start on 3 of 4 nodes and ran its hour on one. Before, the
    weakest host was taken over the hosts that recorded a duration: 'burn-in 1 h', a standard rating (then Gold)."""
    run_dir = standard_run(tmp_path)
    for host in ("n2", "n3", "n4"):
        faulted_at_start(run_dir, host)
    verdict = judged(run_dir)
    burnin = measure(verdict, "burnin_s")
    assert burnin["value"] is None and burnin["state"] == "not run" and burnin["host"] == "n2"
    assert burnin["hosts"] == {"n1": 3600.2} and burnin["missing"] == ["n2", "n3", "n4"]
    assert verdict["rating"] == "screening"
    assert verdict["lacks"] == ["burn-in not run on n2, n3, n4 (standard needs 1 h)",
                                "burn-in GEMM size not run on n2, n3, n4 (standard needs 8192)",
                                "burn-in all-to-all message not run on n2, n3, n4 (standard needs 256 MiB)"]
    assert profiles.ran_text(verdict).startswith("burn-in not run on n2, n3, n4, fabric soak 15 min")


def test_a_host_of_the_phase_without_the_burnin_artifact_did_not_run_it(tmp_path):
    """n4 ran the fabric and storage soaks but left no burn-in artifact; n3's journal shows the burn-in's start
    tried there, and nothing came back."""
    run_dir = standard_run(tmp_path, journal=[
        {"host": "n3", "probe": "burnin", "status": "failed", "task": "Burn-in | start on every host the burnin"}])
    (run_dir / "artifacts" / "n4" / "burnin.json").unlink()
    (run_dir / "artifacts" / "n3" / "burnin.json").unlink()
    verdict = judged(run_dir)
    assert measure(verdict, "burnin_s")["missing"] == ["n3", "n4"]
    assert verdict["lacks"][0] == "burn-in not run on n3, n4 (standard needs 1 h)"


def test_a_storage_soak_skipped_on_one_host_did_not_run_there(tmp_path):
    run_dir = standard_run(tmp_path)
    art = Artifact("storage_soak", "r1", "n2")
    art.skip("fio is not installed on this node")
    write(run_dir, art)
    (run_dir / "artifacts" / "n2" / "storage_soak.fio.jsonl").unlink()
    verdict = judged(run_dir)
    assert verdict["lacks"] == ["storage endurance phase not run on n2 (standard needs 7.5 min)",
                                "storage soak client counts not run on n2 (standard needs 1, 8, 32)"]


def test_hosts_where_a_measure_does_not_apply_do_not_count(tmp_path):
    """The fio sweep's servers record nothing (its driver, the first host, records the sweep), a node that was not
    reached has no artifact (the gate unassessed_nodes rates that), and a run whose burn-in phase was not selected
    has no host of it: none of them is a host the measure did not run on."""
    run_dir = standard_run(tmp_path, hosts=HOSTS + ["n5"], journal=[
        {"host": "n5", "status": "unreachable", "task": "Preflight", "msg": "ssh: No route to host"}])
    shutil.rmtree(run_dir / "artifacts" / "n5")
    for host in ("n2", "n3", "n4"):
        art = Artifact("fio_sweep", "r1", host, variant="local")
        art.facts["role"] = "server"
        write_json_atomic(str(run_dir / "artifacts" / host / "fio_sweep-local.json"), art.to_dict())
    verdict = judged(run_dir)
    assert verdict["rating"] == "standard" and verdict["lacks"] == []
    assert measure(verdict, "fio_runtime_s")["hosts"] == {"n1": 30.0}
    assert all(m["missing"] == [] for m in verdict["measures"])
    # the burn-in phase left out on every host: not run, with no host named
    for host in HOSTS:
        for name in ("burnin.json", "fabric_soak.json", "storage_soak.json", "storage_soak.fio.jsonl"):
            (run_dir / "artifacts" / host / name).unlink()
    verdict = judged(run_dir)
    assert verdict["lacks"][0] == "burn-in not run (standard needs 1 h)"
    assert measure(verdict, "burnin_s")["missing"] == []


# ------------------------------------------------------------------------------------------------ time under load

def burnin_of(run_dir, host, **kw):
    doc, out = summarized_burnin(run_dir.parent / "timelines", host, "r1", **kw)
    write_json_atomic(str(run_dir / "artifacts" / host / "burnin.json"), doc)
    for name in doc["raw"]:
        shutil.copy(out / name, run_dir / "artifacts" / host / name)
    return doc


def test_the_burnin_counts_its_time_under_load_not_its_start(tmp_path):
    """The review's run: burnin_duration_s 3500, the 8-node world formed 100 s after the start. The summary's
    elapsed_s (3600 s, from the runner's start) met the standard hour, though the load ran 58 min 20 s; a 58-minute
    burn-in is a screening (test_rating_quick_run)."""
    run_dir = standard_run(tmp_path, hosts=["g1"])
    doc = burnin_of(run_dir, "g1", planned_s=3500.0, load_from_s=100.0)
    plain = {r["metric"]: r["value"] for r in doc["results"] if not r.get("labels")}
    assert plain["elapsed_s"] == 3600.0 and doc["facts"]["load_from_s"] == "100.0"
    verdict = judged(run_dir)
    assert measure(verdict, "burnin_s")["value"] == 3500.0
    assert verdict["rating"] == "screening" and verdict["lacks"] == ["burn-in 58.3 min on g1 < 1 h"]
    # the whole hour under load, after the same 100 s of start-up, meets it
    shutil.rmtree(run_dir.parent / "timelines")
    burnin_of(run_dir, "g1", planned_s=3600.0, load_from_s=100.0)
    verdict = judged(run_dir)
    assert measure(verdict, "burnin_s")["value"] == 3600.0 and verdict["rating"] == "standard"
    assert verdict["notes"] == []


def test_the_fabric_soak_counts_its_time_under_load_too(tmp_path):
    run_dir = standard_run(tmp_path)
    write(run_dir, soak_artifact("fabric_soak", "r1", "n2", 902.1, 60.0))
    verdict = judged(run_dir)
    assert measure(verdict, "fabric_soak_s")["value"] == 842.1
    assert verdict["lacks"] == ["fabric soak 14 min on n2 < 15 min"]


def test_an_artifact_without_the_load_start_counts_from_the_start_and_says_so(tmp_path):
    """Older probes recorded no load_from_s: their elapsed_s is all the run can tell, and the verdict says that it is
    counted from the start."""
    run_dir = standard_run(tmp_path)
    for host in HOSTS:
        write(run_dir, soak_artifact("burnin", "r1", host, 3600.2))
    verdict = judged(run_dir)
    assert measure(verdict, "burnin_s")["value"] == 3600.2 and verdict["rating"] == "standard"
    note = ("burn-in counted from its start on n1, n2, n3, n4: the artifact records no load start (load_from_s: "
            "older probes, or collectives that never began), so start-up time is in it")
    assert measure(verdict, "burnin_s")["note"] == note and verdict["notes"] == [note]


def test_the_profiles_section_is_valid_and_refuses_bad_size_minimums():
    assert profiles.validate_profiles(SPEC) == []
    bad = dict(SPEC, minimums={"standard": dict(SPEC["minimums"]["standard"], burnin_gemm_size={"gpu": 8192},
                                                storage_soak_clients=32)})
    problems = profiles.validate_profiles(bad)
    assert "profiles.minimums.standard.burnin_gemm_size: a minimum by backend needs gpu and cpu numbers" in problems
    assert "profiles.minimums.standard.storage_soak_clients: needs a list of numbers (the measure is a set)" \
        in problems
