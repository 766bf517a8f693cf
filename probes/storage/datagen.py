"""datagen: the seed's robotics data-generation pipeline on one storage tier, every host at once.

Seed, "Storage": "a custom datagen benchmark ... aggregate write throughput generating the video (MP4) and parquet
sensor dataset". Every host, after a barrier with the others, writes `episodes` episodes into its own directory on
the tier. An episode is what a robot logger or a simulation writes: one MP4 segment (H.264 through PyAV, which
carries FFmpeg's libx264; mpeg4 where libx264 is missing, and the fact says which) of `frames` synthetic camera
frames at `width` x `height`, and one parquet shard (pyarrow, zstd) of `rows` sensor samples (timestamp, 6-axis IMU,
7 joint positions and velocities, GPS). Each file is fsynced before it counts: the storage, not the page cache,
holds it.
Per host: `bytes_per_s` and `files_per_s` (everything the host wrote over its wall time, encoding included: the
pipeline's rate), `video_bytes_per_s`, `parquet_bytes_per_s`, `bytes`, `files`, `seconds`. On the first host, from
every host's numbers: `aggregate_bytes_per_s` and `aggregate_files_per_s` (all bytes over the slowest host's time:
they started together). Needs numpy, PyAV (`av`) and pyarrow in the probe's Python (the tools step installs them
with tools_venv_packages); skipped with the reason where they are missing. The files are removed afterwards, also
after a failure.
"""

import os
import time

from probes.common import tiers as storage_tier
from probes.common.ports import port_param
from probes.common.rendezvous import Mesh, StoreError
from probes.params import Param, Params

PARAMS = Params(
    peers=True,
    tier=Param(dict, None, "the storage tier {name, path, shared} to write the dataset to"),
    episodes=Param(int, 4, "episodes per host: one MP4 segment and one parquet shard each"),
    frames=Param(int, 60, "video frames per segment"),
    width=Param(int, 640, "frame width (pixels)"),
    height=Param(int, 480, "frame height (pixels)"),
    fps=Param(int, 30, "frames per second of the video"),
    rows=Param(int, 100000, "sensor samples per parquet shard"),
    sync_port=Param(int, 0, "port of the run's store on the first host (0: derived from the run id and the tier)"),
    connect_timeout=Param(float, 120, "seconds to wait for every host before and after writing"),
    space_factor=Param(float, 1.5, "free space needed on the tier, as a multiple of the estimated dataset"),
)
CODECS = ("libx264", "mpeg4")  # H.264 as robotics datasets store it; mpeg4 where the FFmpeg build lacks libx264
SENSOR_COLUMNS = (["timestamp_ns"] + ["imu_%s" % a for a in ("ax", "ay", "az", "gx", "gy", "gz")]
                  + ["joint_pos_%d" % i for i in range(7)] + ["joint_vel_%d" % i for i in range(7)]
                  + ["gps_lat", "gps_lon", "gps_alt"])


def import_libraries():
    """(numpy, av, pyarrow, pyarrow.parquet), or a ValueError naming each one that does not import."""
    import sys  # noqa: PLC0415

    mods, missing = [], []
    for load in (_numpy, _av, _pyarrow, _parquet):
        try:
            mods.append(load())
        except Exception as exc:  # noqa: BLE001 - a broken install is a reason too
            missing.append("%s (%s: %s)" % (load.__doc__, type(exc).__name__, exc))
    if missing:
        raise ValueError("datagen needs numpy, PyAV and pyarrow in %s; missing: %s (tools_venv_packages: [av, "
                         "pyarrow])" % (sys.executable, "; ".join(missing)))
    return mods


# Imported lazily, each on its own: a node without them skips datagen with the reason, the other probes run.
def _numpy():
    """numpy"""
    import numpy  # noqa: PLC0415

    return numpy


def _av():
    """av (PyAV)"""
    import av  # noqa: PLC0415

    return av


def _pyarrow():
    """pyarrow"""
    import pyarrow  # noqa: PLC0415

    return pyarrow


def _parquet():
    """pyarrow.parquet"""
    import pyarrow.parquet  # noqa: PLC0415

    return pyarrow.parquet


def pick_codec(av):
    return next((c for c in CODECS if c in av.codecs_available), None)


def write_segment(np, av, path, codec, frames, width, height, fps, seed):
    """One MP4 of synthetic camera frames: a moving scene plus sensor noise in every channel, so that the encoder
    works as hard as on camera footage and writes a camera's bitrate, not a flat test pattern's."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width]
    with av.open(path, mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            scene = np.stack([(xs + 4 * i) % 192, (ys + 2 * i) % 192, (xs + ys + 3 * i) % 192], axis=-1)
            rgb = (scene + rng.integers(0, 64, size=(height, width, 3))).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    storage_tier.fsync_path(path)


def write_shard(np, pa, pq, path, rows, seed):
    """One parquet shard of sensor samples (float32 channels, int64 timestamps at 1 kHz), zstd-compressed."""
    rng = np.random.default_rng(seed)
    columns = {"timestamp_ns": np.arange(rows, dtype=np.int64) * 1_000_000}
    for name in SENSOR_COLUMNS[1:]:
        columns[name] = np.cumsum(rng.standard_normal(rows, dtype=np.float32) * 0.01, dtype=np.float32)
    pq.write_table(pa.table(columns), path, compression="zstd")
    storage_tier.fsync_path(path)


def estimate_bytes(p):
    """A generous bound of one host's dataset: raw frames / 10 (H.264 of noisy frames) + 4 bytes per sensor value."""
    return p["episodes"] * (p["frames"] * p["width"] * p["height"] * 3 // 10 + p["rows"] * len(SENSOR_COLUMNS) * 4)


def generate(libs, p, directory, rank, codec):
    """Writes this host's episodes; returns {video_bytes, parquet_bytes, files, seconds, video_s, parquet_s}."""
    np, av, pa, pq = libs
    out = {"video_bytes": 0, "parquet_bytes": 0, "files": 0, "video_s": 0.0, "parquet_s": 0.0}
    t0 = time.perf_counter()
    for e in range(p["episodes"]):
        seed = rank * 100003 + e
        video, shard = (os.path.join(directory, "episode_%04d.%s" % (e, ext)) for ext in ("mp4", "parquet"))
        t = time.perf_counter()
        write_segment(np, av, video, codec, p["frames"], p["width"], p["height"], p["fps"], seed)
        out["video_s"] += time.perf_counter() - t
        t = time.perf_counter()
        write_shard(np, pa, pq, shard, p["rows"], seed)
        out["parquet_s"] += time.perf_counter() - t
        out["video_bytes"] += os.path.getsize(video)
        out["parquet_bytes"] += os.path.getsize(shard)
        out["files"] += 2
    out["seconds"] = time.perf_counter() - t0
    return out


def run(art, p, out_dir):
    tier = storage_tier.check_tier(p["tier"])
    hosts = p["hosts"] or [{"name": art.host, "addr": "127.0.0.1"}]
    rank, world = p["rank"], len(hosts)
    me = hosts[rank]
    art.facts.update({"tier": tier["name"], "tier_path": tier["path"], "tier_shared": tier["shared"],
                      "episodes": p["episodes"], "frames": p["frames"], "resolution": "%dx%d" % (p["width"],
                                                                                               p["height"]),
                      "rows": p["rows"]})
    why, libs, codec = None, None, None
    try:
        libs = import_libraries()
        codec = pick_codec(libs[1])
        why = None if codec else "this PyAV's FFmpeg has none of the encoders %s" % ", ".join(CODECS)
    except ValueError as exc:
        why = str(exc)
    if why is None and not os.path.isdir(tier["path"]):
        why = "tier %s: %s does not exist on %s" % (tier["name"], tier["path"], me["name"])
    if why is None:
        why = storage_tier.check_space(tier["path"], estimate_bytes(p) * (world if tier["shared"] else 1),
                                       p["space_factor"])
    base = storage_tier.run_dir(tier["path"], art.run_id)
    directory = os.path.join(base, "datagen-%s" % tier["name"], me["name"])  # each host its own files
    mesh, mine, late = None, None, []
    try:
        if world > 1:
            port = port_param(p, "sync_port", art.run_id, "datagen/%s" % tier["name"])
            mesh = Mesh([h["name"] for h in hosts], [h["addr"] for h in hosts], rank, port,
                        "%s/datagen/%s" % (art.run_id, tier["name"]), connect_timeout=p["connect_timeout"])
            # every host starts writing together; one that is late makes a sum over the slowest time meaningless
            late = mesh.barrier("start", p["connect_timeout"], abort_on_lost=True)
            if late:
                art.facts["late_hosts"] = late
        if why is None:
            art.facts["codec"] = codec
            art.device.update({"pyav": libs[1].__version__, "pyarrow": libs[2].__version__})
            os.makedirs(directory, exist_ok=True)
            try:
                mine = generate(libs, p, directory, rank, codec)
            except Exception as exc:  # noqa: BLE001 - a full disk or an encoder failure is this host's result
                art.error("writing the dataset on %s failed: %s: %s" % (tier["path"], type(exc).__name__, exc))
        if mine:
            _record(art, mine, tier["name"])
        if mesh is not None:
            # the slowest host's writing is the wait: a second per frame is far above any CPU's encoder
            everyone = mesh.allgather(mine, timeout=p["connect_timeout"] + p["episodes"] * (p["frames"] + 30))
            if rank == 0 and late:
                art.facts["aggregate"] = "not computed: %s did not start with the others" % ", ".join(late)
            elif rank == 0:
                _aggregate(art, everyone, hosts, tier["name"])
    except StoreError as exc:
        # the hosts did not meet (or one left): this host's own numbers stand, the run's coordination failed
        art.facts["store_error"] = str(exc)
        if why is None:
            art.error("the hosts did not meet in the run's store: %s" % exc)
    finally:
        if mesh is not None:
            mesh.close()
        errors = storage_tier.remove_tree(directory, stop_at=base)
        if errors:
            art.facts["cleanup_errors"] = errors[:5]
    if why is not None:
        art.skip(why)


def _record(art, mine, tier):
    total = mine["video_bytes"] + mine["parquet_bytes"]
    labels = {"tier": tier, "scope": "host"}
    art.add("bytes", total, "B", **labels)
    art.add("files", mine["files"], "count", **labels)
    art.add("seconds", round(mine["seconds"], 4), "s", **labels)
    art.add("bytes_per_s", round(total / mine["seconds"], 1), "B/s", **labels)
    art.add("files_per_s", round(mine["files"] / mine["seconds"], 3), "1/s", **labels)
    art.add("video_bytes_per_s", round(mine["video_bytes"] / mine["video_s"], 1), "B/s", **labels)
    art.add("parquet_bytes_per_s", round(mine["parquet_bytes"] / mine["parquet_s"], 1), "B/s", **labels)


def _aggregate(art, everyone, hosts, tier):
    """All hosts' bytes and files over the slowest host's time (they started at one barrier)."""
    wrote = [(h["name"], m) for h, m in zip(hosts, everyone) if m]
    art.facts["aggregate_hosts"] = len(wrote)
    left_out = [h["name"] for h, m in zip(hosts, everyone) if not m]
    if left_out:
        art.facts["aggregate_without"] = left_out  # hosts that wrote nothing (skipped or failed): not in the sum
    if not wrote:
        return
    slowest = max(m["seconds"] for _, m in wrote)
    total = sum(m["video_bytes"] + m["parquet_bytes"] for _, m in wrote)
    files = sum(m["files"] for _, m in wrote)
    labels = {"tier": tier, "scope": "cluster", "hosts": len(wrote)}
    art.add("aggregate_bytes_per_s", round(total / slowest, 1), "B/s", **labels)
    art.add("aggregate_files_per_s", round(files / slowest, 3), "1/s", **labels)
