"""datagen (probes/storage/datagen.py): the robotics dataset it writes is real (MP4 that decodes to its frames,
parquet that reads back to its rows), two hosts on loopback write at once into their own directories on a shared
tier, the first host sums them over the slowest one's time, nothing is left behind, and a host without PyAV says
why."""

import json
import os
import subprocess
import sys
from pathlib import Path

import av
import pyarrow.parquet as pq
from free_ports import free_port

from probes.cli import run_probe
from probes.storage import datagen

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"episodes": 2, "frames": 8, "width": 160, "height": 96, "fps": 30, "rows": 3000}


def test_an_episode_is_a_real_video_and_a_real_parquet_shard(tmp_path):
    libs = datagen.import_libraries()
    out = datagen.generate(libs, SMALL, str(tmp_path), 0, datagen.pick_codec(libs[1]))
    assert out["files"] == 4 and sorted(os.listdir(tmp_path)) == [
        "episode_0000.mp4", "episode_0000.parquet", "episode_0001.mp4", "episode_0001.parquet"]
    with av.open(str(tmp_path / "episode_0001.mp4")) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        assert (stream.codec_context.name, stream.width, stream.height) == ("h264", 160, 96)
    assert len(frames) == 8
    table = pq.read_table(tmp_path / "episode_0000.parquet")
    assert table.num_rows == 3000 and table.column_names == list(datagen.SENSOR_COLUMNS)
    assert pq.ParquetFile(tmp_path / "episode_0000.parquet").metadata.row_group(0).column(1).compression == "ZSTD"
    assert out["video_bytes"] + out["parquet_bytes"] == sum(f.stat().st_size for f in tmp_path.iterdir())
    # noise in every channel: a camera's bitrate, not a test pattern's (the same moving scene without the noise
    # encodes to 2.7 kB here)
    assert os.path.getsize(tmp_path / "episode_0001.mp4") > 15000


def test_two_hosts_write_at_once_and_the_first_sums_them(tmp_path):
    tier = {"name": "shared", "path": str(tmp_path / "tier"), "shared": True}
    (tmp_path / "tier").mkdir()
    hosts = [{"name": "a", "addr": "127.0.0.1"}, {"name": "b", "addr": "127.0.0.1"}]
    procs, port = [], free_port()
    for rank, host in enumerate(hosts):
        params = dict(SMALL, tier=tier, hosts=hosts, rank=rank, sync_port=port, connect_timeout=30)
        procs.append(subprocess.Popen([sys.executable, "-m", "probes", "datagen", "--out", str(tmp_path / host["name"]),
                                       "--host", host["name"], "--run-id", "r-datagen", "--variant", "shared",
                                       "--params", json.dumps(params)],
                                      cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    docs = {h["name"]: json.loads((tmp_path / h["name"] / "datagen-shared.json").read_text()) for h in hosts}
    per_host = {}
    for name, doc in docs.items():
        assert doc["status"] == "ok", doc.get("reason")
        values = {r["metric"]: r["value"] for r in doc["results"] if r["labels"]["scope"] == "host"}
        assert values["files"] == 4 and values["bytes"] > 0
        assert abs(values["bytes_per_s"] - values["bytes"] / values["seconds"]) <= 0.01 * values["bytes_per_s"]
        per_host[name] = values
    aggregate = {r["metric"]: r["value"] for r in docs["a"]["results"] if r["labels"]["scope"] == "cluster"}
    slowest = max(v["seconds"] for v in per_host.values())
    assert abs(aggregate["aggregate_bytes_per_s"] - sum(v["bytes"] for v in per_host.values()) / slowest) <= (
        0.01 * aggregate["aggregate_bytes_per_s"])
    assert abs(aggregate["aggregate_files_per_s"] - 8 / slowest) <= 0.01 * aggregate["aggregate_files_per_s"]
    assert not [r for r in docs["b"]["results"] if r["labels"]["scope"] == "cluster"]
    # every host's files are gone, and so is the run's directory on the tier
    assert os.listdir(tmp_path / "tier") == []
    # the report's table and the check, from the artifacts
    from reports.grading import grade, load_rubric
    from reports.load import run_of_artifacts
    from reports.phases.storage import section
    from reports.render import markdown

    run = run_of_artifacts(list(docs.values()))
    text = markdown.render(section.datagen_part(run))
    assert "| shared | all 2 hosts |" in text and "| shared | a | libx264 | 4 |" in text, text
    rows = [r for r in grade(run, load_rubric()) if r["check_id"] == "storage.datagen"]
    assert sorted((r["host"], r["subject"]) for r in rows) == [("a", "tier=shared"), ("b", "tier=shared")]
    assert {r["status"] for r in rows} <= {"pass", "warn"}


def test_a_host_without_pyav_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(datagen, "import_libraries",
                        lambda: (_ for _ in ()).throw(ValueError("datagen needs numpy, PyAV and pyarrow")))
    _, doc = run_probe("datagen", str(tmp_path / "out"), "r", "h", params=dict(
        SMALL, tier={"name": "scratch", "path": str(tmp_path), "shared": False}))
    assert doc["status"] == "skipped" and doc["reason"].startswith("datagen needs numpy, PyAV and pyarrow")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_host_that_cannot_meet_the_others_is_an_error_and_writes_nothing(tmp_path):
    tier = {"name": "shared", "path": str(tmp_path / "tier"), "shared": True}
    (tmp_path / "tier").mkdir()
    hosts = [{"name": "a", "addr": "127.0.0.1"}, {"name": "b", "addr": "127.0.0.1"}]
    # host b alone: the first host (the store) never comes
    _, doc = run_probe("datagen", str(tmp_path / "b"), "r", "b", params=dict(
        SMALL, tier=tier, hosts=hosts, rank=1, sync_port=free_port(), connect_timeout=2))
    assert doc["status"] == "error" and doc["reason"].startswith("the hosts did not meet in the run's store")
    assert doc["results"] == [] and os.listdir(tmp_path / "tier") == []
