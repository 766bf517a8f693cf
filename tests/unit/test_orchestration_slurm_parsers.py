"""The parsers of probes/orchestration/slurm_jobs.py on real Slurm output: sdiag's RPC statistics by message type,
`scontrol show topology` (topology/tree and topology/block) and sinfo's GRES field, from captures kept in
tests/fixtures/slurm_jobs (each with its public source in that folder's README.md), plus the probe's own GPU step
run for real by sh. Variants that no capture shows (the RPC queue columns, a row cut short) are built from a capture
or from the printf format in Slurm's sdiag.c, and say so."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probes.artifact import Artifact
from probes.common.command import CmdResult
from probes.orchestration import slurm_jobs as sj

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_jobs"


def fixture(name):
    return (FIX / name).read_text()


def by_user_totals(text):
    """The capture's own "Remote Procedure Call statistics by user" totals (count, total_time): every RPC by type is
    also counted by user, so the two sums agree when no row of the by-type section was lost."""
    section = text.split("Remote Procedure Call statistics by user", 1)[1].split("Pending RPC", 1)[0]
    rows = re.findall(r"count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)", section)
    return sum(int(c) for c, _ in rows), sum(int(t) for _, t in rows)


# ---------------------------------------------------------------------------------------------------------- sdiag

SDIAG = {
    # capture: (message types, REQUEST_SUBMIT_BATCH_JOB, another row)
    "sdiag_22.05.8_testcluster.txt": (4, (2, 5952), ("MESSAGE_NODE_REGISTRATION_STATUS", (4, 7128))),
    "sdiag_2020_treydock.txt": (15, (12, 29401), ("ACCOUNTING_UPDATE_MSG", (11592, 41442149799))),
    "sdiag_24.11.7_sckyzo.txt": (12, (15, 23957), ("MESSAGE_NODE_REGISTRATION_STATUS", (20, 106146))),
    "sdiag_26.05.2_sckyzo.txt": (12, (14, 12796), ("REQUEST_CREATE_PARTITION", (2, 358))),
    "sdiag_soperator_issue1026.txt": (8, None, ("ACCOUNTING_REGISTER_CTLD", (1, 7551))),
}


@pytest.mark.parametrize("name", sorted(SDIAG))
def test_sdiag_rpcs_by_message_type(name):
    text = fixture(name)
    types, submit, (other, value) = SDIAG[name]
    rpcs = sj.parse_sdiag_rpcs(text)
    assert len(rpcs) == types
    assert rpcs.get("REQUEST_SUBMIT_BATCH_JOB") == submit
    assert rpcs[other] == value
    # every row read: the by-type sums equal the capture's own by-user sums, and no user row was taken for a type
    assert (sum(c for c, _ in rpcs.values()), sum(t for _, t in rpcs.values())) == by_user_totals(text)
    assert not {"root", "slurm", "prometheus", "user5", "user6"} & set(rpcs)


def test_sdiag_wide_columns_2020():
    """An id of 5 digits fills its parentheses, and an ave_time of 7 digits leaves one space before total_time."""
    rpcs = sj.parse_sdiag_rpcs(fixture("sdiag_2020_treydock.txt"))
    assert rpcs["ACCOUNTING_UPDATE_MSG"] == (11592, 41442149799)
    assert rpcs["REQUEST_PARTITION_INFO"] == (83026, 29259362)
    assert rpcs["REQUEST_RESERVATION_INFO"] == (1, 214)


def test_sdiag_rpc_delta_on_a_capture():
    """rpc_delta from nothing to the 24.11.7 capture: the reading RPCs (INFO, PING, STATS) are left out."""
    rpcs = sj.parse_sdiag_rpcs(fixture("sdiag_24.11.7_sckyzo.txt"))
    # MESSAGE_NODE_REGISTRATION_STATUS 20/106146 + SUBMIT 15/23957 + UPDATE_NODE 10/1725 + CREATE_PARTITION 2/350
    assert sj.rpc_delta({}, rpcs) == (15, 23957, 47, 132178)
    assert sj.rpc_delta(rpcs, rpcs) == (0, 0, 0, 0)


def test_sdiag_without_the_rpc_section_fails():
    """The 2017 capture stops after the backfill statistics: no counts, rather than counts of zero."""
    with pytest.raises(sj.Failed, match="no \"Remote Procedure Call statistics by message type\" section"):
        sj.parse_sdiag_rpcs(fixture("sdiag_2017_vpenso_no_rpc_section.txt"))
    with pytest.raises(sj.Failed):
        sj.parse_sdiag_rpcs("")


def test_sdiag_row_cut_short_fails():
    """A row of the 24.11.7 capture cut after its count: the parser says so instead of dropping the row."""
    text = fixture("sdiag_24.11.7_sckyzo.txt")
    row = next(line for line in text.splitlines() if "REQUEST_SUBMIT_BATCH_JOB" in line)
    with pytest.raises(sj.Failed, match="REQUEST_SUBMIT_BATCH_JOB"):
        sj.parse_sdiag_rpcs(text.replace(row, row.split(" ave_time")[0]))


def test_sdiag_rpc_queue_columns_and_long_names():
    """Rows rendered with the printf formats of Slurm's src/sdiag/sdiag.c (no capture shows them): with
    RPC queue enabled queued:/cycle_last:/cycle_max:/dropped: follow total_time, and a name of 40
    characters or more touches its "(". The section ends at "Pending RPC statistics", whose rows look alike."""
    queue_fmt = ("\t%-40s(%5u) count:%-6u ave_time:%-6u total_time:%-12u queued:%-6u cycle_last:%-6u "
                 "cycle_max:%-6u dropped:%u")
    plain_fmt = "\t%-40s(%5u) count:%-6u ave_time:%-6u total_time:%u"
    text = "\n".join([
        "Remote Procedure Call statistics by message type",
        queue_fmt % ("REQUEST_SUBMIT_BATCH_JOB", 4003, 15, 1597, 23957, 2, 1, 3, 0),
        plain_fmt % ("X" * 41, 5999, 3, 10, 30),
        "",
        "Pending RPC statistics",
        "\t%-40s(%5u) count:%-6u" % ("REQUEST_TERMINATE_JOB", 6011, 4),
    ])
    assert sj.parse_sdiag_rpcs(text) == {"REQUEST_SUBMIT_BATCH_JOB": (15, 23957), "X" * 41: (3, 30)}
    assert sj.parse_sdiag_rpcs("Remote Procedure Call statistics by message type\n\tNo RPCs recorded yet.\n") == {}


# ------------------------------------------------------------------------------------------- scontrol show topology

def test_topology_tree_22_05_8():
    sw = {s["name"]: s for s in sj.parse_topology(fixture("scontrol_show_topology_22.05.8_testcluster.txt"))}
    assert sw["leaf1"] == {"name": "leaf1", "level": 0, "nodes": "cmxz-node1,cmxz-node2", "switches": "",
                           "kind": "switch"}
    assert sw["leaf2"]["nodes"] == "cmxz-node3,cmxz-node4"
    assert sw["spine"] == {"name": "spine", "level": 1, "nodes": "cmxz-node[1-4]", "switches": "leaf1,leaf2",
                           "kind": "switch"}


def test_topology_tree_trailing_space_before_23_11():
    """Before 23.11 scontrol (src/api/topo_info.c) ended every field, the last one too, with a space."""
    text = fixture("scontrol_show_topology_22.05.8_testcluster.txt")
    spaced = "".join(line + " \n" for line in text.splitlines())
    assert sj.parse_topology(spaced) == sj.parse_topology(text)


def test_topology_tree_gcm_empty_nodes():
    switches = sj.parse_topology(fixture("scontrol_show_topology_tree_gcm.txt"))
    assert [(s["name"], s["level"]) for s in switches] == [("cpu", 0), ("h100", 0), ("spine-use2-az3-0", 1),
                                                           ("data-transfer", 0)]
    assert switches[0]["nodes"] == "cpu-000-109,cpu-002-219,cpu-003-040"
    assert switches[2]["nodes"] == "h100-008-154,h100-236-009" and switches[2]["switches"] == "h100"
    assert switches[3]["nodes"] == "" and switches[3]["switches"] == ""
    assert {s["kind"] for s in switches} == {"switch"}


def test_topology_block_gcm():
    """topology/block base blocks are leaves: a job inside one leaf is a job inside one block."""
    blocks = sj.parse_topology(fixture("scontrol_show_topology_block_gcm.txt"))
    assert blocks == [
        {"name": "block_DH1-062-US-EAST-04B", "level": 0, "nodes": "g3-129-[057,059,063]", "switches": "",
         "kind": "block"},
        {"name": "block_DH1-064-US-EAST-04B", "level": 0, "nodes": "g3-129-[127,129,131]", "switches": "",
         "kind": "block"},
        {"name": "block_DH1-067-US-EAST-04B", "level": 0, "nodes": "g3-129-[235,237],g3-130-[001,003]",
         "switches": "", "kind": "block"},
    ]


def test_topology_block_aggregated_oke_gb300():
    """An AggregatedBlock spans the base blocks its name lists: not a leaf."""
    blocks = sj.parse_topology(fixture("scontrol_show_topology_block_aggregated_oke_gb300.txt"))
    leaves = [b for b in blocks if b["level"] == 0]
    assert [(b["name"], b["nodes"]) for b in leaves] == [("gb300_b0", "10.140.71.103,10.140.88.115"),
                                                         ("gb300_b1", "10.140.79.152,10.140.93.120")]
    assert blocks[2] == {"name": "gb300_b[0-1]", "level": 1,
                         "nodes": "10.140.71.103,10.140.79.152,10.140.88.115,10.140.93.120",
                         "switches": "gb300_b[0-1]", "kind": "block"}


def test_topology_unreadable_lines_fail():
    text = fixture("scontrol_show_topology_22.05.8_testcluster.txt")
    cut = text.replace("Nodes=cmxz-node[1-4]", "Nodes=cmxz-node[1-")  # a hostlist cut short (pre-23.11 511 chars)
    with pytest.raises(sj.Failed, match="Nodes of spine cut short"):
        sj.parse_topology(cut)
    with pytest.raises(sj.Failed, match="cannot read the line"):
        sj.parse_topology(text + "Switch leaf3 Level 0\n")
    with pytest.raises(sj.Failed, match="Level="):
        sj.parse_topology(text.replace("Level=1", "Level=x"))
    assert sj.parse_topology("") == []


# ------------------------------------------------------------------------------------------------------ sinfo %G

def test_gres_22_05_8_testcluster():
    rows = [line.split("|") for line in fixture("sinfo_gres_22.05.8_testcluster.txt").splitlines()]
    assert {r[0]: sj.gres_gpus(r[1]) for r in rows} == {"cmxz-node%d" % i: 2 for i in range(1, 5)}


def test_gres_and_gresused_24_11_7_typed_multi_type():
    """sinfo -h -N -O NodeList: ,AllocMem: ,Memory: ,CPUsState: ,StateLong: ,Partition: ,Gres: ,GresUsed:"""
    rows = [line.split() for line in fixture("sinfo_nodes_gres_24.11.7_sckyzo.txt").splitlines()]
    gpus = {r[0]: sj.gres_gpus(r[6]) for r in rows}
    assert gpus["na1"] == 0 and gpus["na10"] == 0  # (null)
    assert [gpus["nb%d" % i] for i in range(1, 11)] == [4] * 10  # nb9/nb10: gpu:model_a:2,gpu:model_b:2
    assert {sj.gres_gpus(r[7]) for r in rows} == {0}  # gpu:model_a:0(IDX:N/A),gpu:model_b:0(IDX:N/A)


def test_gres_and_gresused_25_05_sockets_and_index_lists():
    rows = [line.split() for line in fixture("sinfo_nodes_gres_25.05_sckyzo.txt").splitlines()]
    gres = {r[0]: sj.gres_gpus(r[6]) for r in rows}
    used = {r[0]: sj.gres_gpus(r[7]) for r in rows}
    assert gres == {"a001": 4, "a002": 4, "a003": 4, "a004": 4, "a005": 4, "c001": 0}  # gpu:model_a:4(S:0-3)
    assert used == {"a001": 4, "a002": 0, "a003": 0, "a004": 0, "a005": 2, "c001": 0}  # a005: (IDX:0,3)


def test_gres_total_25_11_1_mig_and_hyphenated_types():
    """sinfo --Format=Nodes: ,Gres: one line per node group: node count, then the GRES."""
    rows = [line.split() for line in fixture("sinfo_gres_total_25.11.1_sckyzo.txt").splitlines()]
    per = [(int(n), sj.gres_gpus(g)) for n, g in rows]
    assert per == [(1637, 0), (2, 4), (1, 2), (1, 3), (2, 3), (3, 2), (10, 4), (1, 4), (1, 21), (4, 16)]
    assert sum(n * g for n, g in per) == 154


def test_gres_vpenso_20_11_8_and_21_08_5():
    assert [sj.gres_gpus(line.split()[1]) for line in fixture("sinfo_gres_total_20.11.8_vpenso.txt").splitlines()] \
        == [0, 2]
    nodes, gres, used = fixture("sinfo_gres_idle_21.08.5_vpenso.txt").split()
    assert (nodes, sj.gres_gpus(gres), sj.gres_gpus(used)) == ("2", 8, 0)  # used: gpu:(null):0(IDX:N/A)


def test_gres_types_with_socket_per_type():
    rows = dict(line.split() for line in fixture("sinfo_gres_types_sockets_vpenso.txt").splitlines())
    assert {n: sj.gres_gpus(g) for n, g in rows.items()} == {"host-01": 4, "host-02": 4, "host-03": 4,
                                                             "host-04": 2, "host-05": 1}


def test_gres_untyped_with_sockets_and_null():
    rows = [line.split() for line in fixture("sinfo_gres_sockets_null_vpenso.txt").splitlines()]
    gpus = {n: sj.gres_gpus(g) for n, g in rows}
    assert gpus["test-blue03"] == 4 and gpus["test-orange08"] == 8 and gpus["test-yellow103"] == 0
    assert sum(gpus.values()) == 4 + 20 * 8


def test_gres_shard_beside_gpu_and_hostlist_rows():
    """sinfo -o "%N %G": the shards of gpu-33-28 are not GPUs."""
    lines = fixture("sinfo_N_G_shard_nn-pipelines.txt").splitlines()[1:]  # the header line
    gpus = dict((n, sj.gres_gpus(g)) for n, g in (line.rsplit(" ", 1) for line in lines))
    assert gpus == {"compute-11-[24,26-30],compute-12-[00-26,28-47],compute-14-[00-22,24-47],compute-15-[00-07],"
                    "compute-17-[00-47],compute-33-[02-11],compute-34-[00-02,04-31],compute-41-[01-25]": 0,
                    "gpu-42-00": 8, "gpu-15-[23-24,27-28,31-32]": 4, "gpu-33-28": 2}


def test_gres_other_formats():
    node, gres = fixture("sinfo_N_comma_G_basnijholt_issue11.txt").strip().split(",", 1)
    assert (node, sj.gres_gpus(gres)) == ("node0001", 8)  # gpu:8(S:0-3)
    tmp = [line.split()[1] for line in fixture("sinfo_n_G_tmp_gres_vpenso_issue38.txt").splitlines()]
    assert tmp[0] == "tmp:844G" and {sj.gres_gpus(g) for g in tmp} == {0}  # a GRES that is not a GPU
    assert sj.gres_gpus("") == 0 and sj.gres_gpus(None) == 0


# ------------------------------------------------------------------------------------------------ the GPU step

def test_gpu_step_run_by_sh(tmp_path):
    """GPU_STEP run by sh as a job step would run it (slurmd sets SLURMD_NODENAME: Slurm's name of the node, which
    the topology and the idle lists use, not the host name), with no nvidia-smi on PATH."""
    env = {"PATH": str(tmp_path), "SLURM_JOB_ID": "4242", "CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_GPUS": "2,3",
           "SLURMD_NODENAME": "gpu-a17"}
    out = subprocess.run(["/bin/sh", "-c", sj.GPU_STEP], env=env, capture_output=True, text=True, check=True).stdout
    step = sj.parse_gpu_step(out)
    assert step == {"job": "4242", "cuda_visible_devices": "0,1", "job_gpus": "2,3", "step_gpus": None,
                    "node": "gpu-a17", "nvidia_smi_gpus": None, "nvidia_smi_mig": None}


def test_gpu_step_counts_the_mig_devices_a_job_was_given(tmp_path):
    """A job given two MIG devices of one GPU (gres gpu:a100_3g.40gb:2): nvidia-smi -L in the step lists the parent
    GPU and then each MIG device (the listing a container given two MIG devices shows, NVIDIA/nvidia-container-toolkit
    #203). The step counted "^GPU " lines, 1, and the check failed the node against CUDA_VISIBLE_DEVICES=0,1."""
    listing = ("GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39)\n"
               "  MIG 3g.40gb     Device  0: (UUID: MIG-0929581a-2be6-5dec-bf34-0954c6c529a6)\n"
               "  MIG 3g.40gb     Device  1: (UUID: MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23)\n")
    (tmp_path / "listing").write_text(listing)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat %s\n" % (tmp_path / "listing"))
    smi.chmod(0o755)
    env = {"PATH": "%s:/usr/bin:/bin" % tmp_path, "SLURM_JOB_ID": "77", "CUDA_VISIBLE_DEVICES": "0,1",
           "SLURM_JOB_GPUS": "0", "SLURMD_NODENAME": "gpu-mig1"}
    out = subprocess.run(["/bin/sh", "-c", sj.GPU_STEP], env=env, capture_output=True, text=True, check=True).stdout
    step = sj.parse_gpu_step(out)
    assert (step["nvidia_smi_gpus"], step["nvidia_smi_mig"]) == (1, 2)
    (tmp_path / "listing").write_text(listing.splitlines()[0] + "\n")  # a whole GPU: one device
    out = subprocess.run(["/bin/sh", "-c", sj.GPU_STEP], env=env, capture_output=True, text=True, check=True).stdout
    step = sj.parse_gpu_step(out)
    assert (step["nvidia_smi_gpus"], step["nvidia_smi_mig"]) == (1, 0)


# ----------------------------------------------------------------------- a compute node's clock against the probe's

def test_clock_readings_take_the_quickest_bracketed_read():
    """host_clocks on each `srun date` step bracketed by this host's clock: a node 15 s behind, the quicker read
    counts; a step that failed and a step without a clock line are left out."""
    reads = [{"before": 100.0, "after": 100.4, "out": "clustermax-assess-clock: 85.3\n", "rc": 0, "err": ""},
             {"before": 101.0, "after": 101.04, "out": "clustermax-assess-clock: 86.02\n", "rc": 0, "err": ""},
             {"before": 102.0, "after": 102.01, "out": "", "rc": 1, "err": "srun: error: Unable to create step\n"}]
    assert sj.clock_readings(sj.HERE, "cmxz-node1", reads) == {"offset_s": -15.0, "uncertainty_s": 0.021}
    assert sj.clock_readings(sj.HERE, "n1", reads[2:]) == {"error": "srun: srun: error: Unable to create step"}


def test_clock_script_run_with_a_step_that_runs_here(tmp_path):
    """CLOCK_SCRIPT as salloc runs it, with an `srun` that runs its command here: date's line is CLOCK_LINE's, and
    this host against itself is 0 within the read's uncertainty."""
    srun = tmp_path / "srun"
    srun.write_text('#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec "$@"\n')
    srun.chmod(0o755)
    env = {"PATH": "%s:/usr/bin:/bin" % tmp_path}
    out = subprocess.run([sys.executable, "-c", sj.CLOCK_SCRIPT, "2"], env=env, capture_output=True, text=True,
                         check=True).stdout
    reads = json.loads(out.split("CMXA ", 1)[1])["reads"]
    assert len(reads) == 2 and all(r["rc"] == 0 for r in reads)
    got = sj.clock_readings(sj.HERE, "here", reads)
    assert abs(got["offset_s"]) <= got["uncertainty_s"] < 1.0


class FakeSession:
    """Session's jobs without Slurm: wait_state answers the (state, seen, before, started) tuples given."""

    def __init__(self, waits, prefix="cmxa-t"):
        self.waits, self.prefix, self.submitted, self.names = list(waits), prefix, [], set()

    def sbatch(self, test, args, timeout=60.0):
        self.submitted.append({"id": str(40 + len(self.submitted)), "test": test, "name": test})
        return self.submitted[-1]["id"]

    def wait_state(self, job_id, done, timeout):
        return self.waits.pop(0)

    def pending_reason(self, job_id):
        return "Resources"

    never_started = sj.Session.never_started

    def common(self, test):
        return ["--job-name=%s-%s" % (self.prefix, test)]


def test_launch_times_are_on_the_probe_hosts_clock(tmp_path, monkeypatch):
    """The reviewer's case: a compute node 15 s behind the probe host, a prolog of 0.5 s and an epilog of 1 s. The
    script's stamps (node clock) are moved onto the probe's clock by the node's offset; RUNNING is timed from the
    start of the poll that saw it; each time carries the clock's uncertainty and the polls'."""
    p = sj.PARAMS.resolve("slurm_jobs", {"launch_samples": 1})
    t0 = time.time()
    (tmp_path / "launch-0.start").write_text("%.6f\nnode7\n" % (t0 + 2.0 - 15))  # RUNNING at t0+1.5, prolog 0.5
    (tmp_path / "launch-0.end").write_text("%.6f\nnode7\n" % (t0 + 3.0 - 15))
    s = FakeSession([("RUNNING", t0 + 1.55, t0 + 1.4, t0 + 1.5), (None, t0 + 4.05, t0 + 3.9, t0 + 4.0)])
    monkeypatch.setattr(sj, "node_clock", lambda s, p, node: {"offset_s": -15.0, "uncertainty_s": 0.02})
    art = Artifact("slurm_jobs", "r1", "login1")
    art.facts["tests"] = {"launch": {"status": "ok", "reason": None}}
    sj.launch_test(s, art, p, str(tmp_path))
    got = {r["metric"]: (r["value"], r["labels"]) for r in art.results}
    assert got["prolog_launch_s"] == (0.5, {"sample": 0, "node": "node7"})
    assert got["prolog_launch_uncertainty_s"][0] == 0.12  # the clock's 0.02 and the poll's 0.1 before its start
    assert got["epilog_s"] == (1.0, {"sample": 0, "node": "node7"})
    assert got["epilog_uncertainty_s"][0] == 0.12
    assert art.facts["node_clocks"] == {"node7": {"offset_s": -15.0, "uncertainty_s": 0.02}}


def test_launch_times_of_a_node_whose_clock_was_not_read_are_left_out_with_the_reason(tmp_path, monkeypatch):
    p = sj.PARAMS.resolve("slurm_jobs", {"launch_samples": 1})
    t0 = time.time()
    (tmp_path / "launch-0.start").write_text("%.6f\nnode7\n" % t0)
    (tmp_path / "launch-0.end").write_text("%.6f\nnode7\n" % t0)
    s = FakeSession([("RUNNING", t0 + 1.55, t0 + 1.4, t0 + 1.5), (None, t0 + 4.05, t0 + 3.9, t0 + 4.0)])
    monkeypatch.setattr(sj, "node_clock", lambda s, p, node: {"error": "salloc: " + BUSY_SALLOC})
    art = Artifact("slurm_jobs", "r1", "login1")
    art.facts["tests"] = {"launch": {"status": "ok", "reason": None}}
    sj.launch_test(s, art, p, str(tmp_path))
    assert {r["metric"] for r in art.results} == {"submit_to_running_s", "running_seen_within_s"}
    assert art.facts["tests"]["launch"]["note"] == (
        "node7's clock could not be read against this host's (salloc: %s): its jobs' script times are left out"
        % BUSY_SALLOC)


# -------------------------------------------------------------- a job Slurm did not run against one that failed

BUSY_SRUN = "srun: error: Unable to allocate resources: Requested nodes are busy"
BUSY_SALLOC = "salloc: error: Unable to allocate resources: Requested nodes are busy"


def fake_run_cmd(answers):
    """run_cmd answering by the command's first word (and, for srun, its GRES flag)."""
    def run(argv, timeout=10.0, env=None, cwd=None):
        key = next((a for a in argv if a.startswith(("--gres", "--gpus"))), argv[0]) if argv[0] == "srun" else argv[0]
        rc, out, err = answers.get(key, (0, "", ""))
        return CmdResult(argv, rc, out, err, False, False)
    return run


def test_gres_requests_slurm_did_not_allocate_are_marked_refused_and_the_test_not_run(monkeypatch):
    p = sj.PARAMS.resolve("slurm_jobs", {})
    ok = (0, "JOB=7\nCVD=0\nJOB_GPUS=0\nSTEP_GPUS=unset\nNODE=g1\nNVSMI_L=GPU 0: NVIDIA H100 80GB HBM3 (UUID: "
             "GPU-7b0c4b36-7d3c-3d88-4bd1-2e7c5c6b2bd9)\nNVSMI=listed\n", "")
    monkeypatch.setattr(sj, "run_cmd", fake_run_cmd({"--gres=gpu:1": ok, "--gpus=1": ok,
                                                     "--gres=gpu:8": (1, "", BUSY_SRUN + "\n")}))
    art = Artifact("slurm_jobs", "r1", "login1")
    s = sj.Session(art, p, "cmxa-t")
    sj.gres_test(s, art, p, {"g1": {"gpus": 8}})  # one request refused, two ran: the test stands
    req = art.facts["gres"]["requests"][1]
    assert (req["flag"], req["rc"], req["refused"], req["error"]) == ("--gres=gpu:8", 1, "Requested nodes are busy",
                                                                      BUSY_SRUN)
    assert "refused" not in art.facts["gres"]["requests"][0]
    refused = (1, "", "srun: job 9 queued and waiting for resources\n" + BUSY_SRUN + "\n")
    monkeypatch.setattr(sj, "run_cmd", fake_run_cmd({"--gres=gpu:1": refused, "--gpus=1": refused,
                                                     "--gres=gpu:8": refused}))
    with pytest.raises(sj.NotRun, match="^--gres=gpu:1 was not allocated: Requested nodes are busy$"):
        sj.gres_test(s, art, p, {"g1": {"gpus": 8}})
    ran = (1, "JOB=7\nCVD=0\n", "srun: error: g1: task 0: Exited with exit code 1\n")
    monkeypatch.setattr(sj, "run_cmd", fake_run_cmd({"--gres=gpu:1": ran}))
    with pytest.raises(sj.Failed) as exc:
        sj.gres_test(s, art, p, {"g1": {"gpus": 8}})
    assert not isinstance(exc.value, sj.NotRun)


def test_an_exclusive_job_pending_past_the_timeout_did_not_run(monkeypatch):
    """It is cancelled (not left queued behind the tests that follow) and marked never started: the accounting
    neither waits for its allocation nor counts its absence."""
    p = sj.PARAMS.resolve("slurm_jobs", {"job_timeout_s": 5})
    s = FakeSession([])
    calls = []

    def pending(job_id, done, timeout):
        raise sj.Failed("job %s still PENDING after %.0f s" % (job_id, timeout))
    s.wait_state = pending
    monkeypatch.setattr(sj, "run_cmd", lambda argv, **kw: calls.append(argv) or CmdResult(argv, 0, "", "", False,
                                                                                           False))
    with pytest.raises(sj.NotRun, match=r"^job 40 still PENDING after 5 s \(Slurm's reason: Resources\)$"):
        sj.exclusive_test(s, Artifact("slurm_jobs", "r1", "login1"), p)
    assert calls == [["scancel", "40"]]
    assert s.submitted == [{"id": "40", "test": "exclusive", "name": "exclusive", "never_started": True}]


def test_a_second_job_refused_for_another_reason_than_a_busy_node_tested_nothing(monkeypatch):
    """Only "Requested nodes are busy" answers the exclusive test; a QoS limit's refusal is no answer."""
    p = sj.PARAMS.resolve("slurm_jobs", {})
    s = FakeSession([("RUNNING", 1.0, 0.9, 0.95)] * 2)
    qos = "srun: error: Unable to allocate resources: Job violates accounting/QOS policy (job submit limit, user's " \
          "size and/or time limits)"
    monkeypatch.setattr(sj, "run_cmd", fake_run_cmd({
        "scontrol": (0, "JobId=40 NodeList=g1 NumCPUs=2 OverSubscribe=NO\nNodeName=g1 CPUTot=2\n", ""),
        "srun": (1, "", qos + "\n")}))
    with pytest.raises(sj.NotRun, match="refused for another reason than a busy node: Job violates"):
        sj.exclusive_test(s, Artifact("slurm_jobs", "r1", "login1"), p)
    monkeypatch.setattr(sj, "run_cmd", fake_run_cmd({
        "scontrol": (0, "JobId=40 NodeList=g1 NumCPUs=2 OverSubscribe=NO\nNodeName=g1 CPUTot=2\n", ""),
        "srun": (1, "", BUSY_SRUN + "\n")}))
    art = Artifact("slurm_jobs", "r1", "login1")
    sj.exclusive_test(s, art, p)
    assert art.facts["exclusive"]["second_job_refused"] is True


def test_a_refusal_names_a_test_not_run_only_when_it_is_not_the_tested_feature():
    """srun's and sbatch's own refusal lines (src/srun/allocate.c, src/sbatch/sbatch.c): busy nodes, an account or a
    QoS mean nothing was tested; a GRES, a node configuration or an array specification refused is the finding."""
    assert sj.refused_reason("srun: error: Unable to allocate resources: Requested nodes are busy") == \
        "Requested nodes are busy"
    assert sj.refused_reason("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
                             "(job submit limit, user's size and/or time limits)").startswith("Job violates")
    for feature in ("srun: error: Unable to allocate resources: Invalid generic resource (gres) specification",
                    "srun: error: Unable to allocate resources: Requested node configuration is not available",
                    "sbatch: error: Batch job submission failed: Invalid job array specification"):
        assert sj.refused_reason(feature) is None, feature
    assert sj.refused_reason("srun: error: cmxz-node2: task 0: Exited with exit code 1") is None
