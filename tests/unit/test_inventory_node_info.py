import os
from pathlib import Path

from probes.artifact import validate
from probes.cli import run_probe
from probes.inventory.node_info import parse_cpuinfo, parse_meminfo

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "proc"


def test_cpuinfo_two_sockets_with_smt():
    cpu = parse_cpuinfo((FIX / "cpuinfo_2s_xeon_excerpt.txt").read_text())
    assert cpu == {"model": "Intel(R) Xeon(R) Platinum 8480+", "logical": 8, "physical_cores": 4, "sockets": 2}


def test_cpuinfo_arm_without_model_name():
    cpu = parse_cpuinfo((FIX / "cpuinfo_grace_excerpt.txt").read_text())
    assert cpu["logical"] == 2 and cpu["sockets"] == 1 and cpu["physical_cores"] == 2
    assert cpu["model"] is None


def test_meminfo_kb_to_bytes():
    mem = parse_meminfo("MemTotal:       2113761612 kB\nHugePages_Total:       0\nMemFree: 10 kB\n")
    assert mem["MemTotal"] == 2113761612 * 1024
    assert mem["HugePages_Total"] == 0


def test_node_info_on_this_machine(tmp_path):
    path, doc = run_probe("node_info", str(tmp_path), "r1", "thishost", params={"torch": False})
    assert validate(doc) == []
    assert doc["status"] == "ok"
    metrics = {r["metric"]: r["value"] for r in doc["results"]}
    assert metrics["cpu_logical_count"] == os.cpu_count()
    assert metrics["memory_total_bytes"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert metrics["gpu_count"] == 0 and doc["device"]["backend"] == "cpu"
    assert doc["facts"]["kernel"] == os.uname().release
    assert os.path.exists(path)
