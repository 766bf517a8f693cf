"""storage_tiers: the storage tiers of this node, and which of them it shares with the other nodes of the run.

With no `storage_tiers` given, the storage phase tests what a user would write to: the tiers are discovered on each
node the way the lifecycle phase discovers them (probes/common/tiers.discover_tiers: home, every shared network or
parallel filesystem, local NVMe/RAID scratch, the temporary directory; one tier per filesystem).

Whether a tier is shared is seen, not taken from its filesystem type (a home directory may be NFS or a local disk; a
FUSE mount may be either): every node writes a marker named after itself into each of its tiers, the nodes meet in
the run's store (the first host serves it), each lists whose markers it sees at each path and posts what it saw, and
once every node has posted, each removes its own marker (the last one out removes the markers' directory). A tier is
shared when every node sees every node's marker there.

Each node then knows every node's tiers and sightings (one all-gather), and records the tiers of the run: those that
every node has, under the same name and path, each marked shared or not; a tier that only some nodes have is left
out, naming them (fio across nodes needs the same path on every client). Every node computes the same list; the
role takes the first host's (roles/storage/tasks/main.yml).

Facts: `tiers` (this node's, JSON), `seen` (path -> the hosts whose markers this node saw, JSON), `left_out` (why a
candidate is not a tier here), `run_tiers` (the run's tiers, JSON), `run_left_out` (tiers not on every node).
Results: per tier of the run, the number of hosts that share it with this node (`tier_hosts_sharing`).
"""

import json
import os

from probes.common import tiers as storage_tier
from probes.common.ports import port_param
from probes.common.rendezvous import Mesh, StoreError
from probes.params import Param, Params

PARAMS = Params(
    peers=True,
    rdzv_timeout=Param(float, 120, "seconds to wait for every host in the run's store"),
    port=Param(int, 0, "port of the run's store on the first host (0: derived from the run id)"),
)

MARKERS = ".clustermax-assess-tiers-"


def _marker_dir(path, run_id):
    return storage_tier.run_dir(path, run_id, MARKERS)


def _write_markers(tiers, run_id, host):
    """{path: why} for the tiers where this node could not leave its marker."""
    problems = {}
    for tier in tiers:
        try:
            os.makedirs(_marker_dir(tier["path"], run_id), exist_ok=True)
            with open(os.path.join(_marker_dir(tier["path"], run_id), host), "w") as fh:
                fh.write(host + "\n")
        except OSError as exc:
            problems[tier["path"]] = "cannot write a marker: %s" % exc
    return problems


def _seen(tiers, run_id):
    out = {}
    for tier in tiers:
        try:
            out[tier["path"]] = sorted(os.listdir(_marker_dir(tier["path"], run_id)))
        except OSError:
            out[tier["path"]] = []
    return out


def _remove_markers(tiers, run_id, host):
    for tier in tiers:
        directory = _marker_dir(tier["path"], run_id)
        try:
            os.unlink(os.path.join(directory, host))
        except OSError:
            pass
        try:
            os.rmdir(directory)  # the last node out; the others find it not empty
        except OSError:
            pass


def run_tiers(hosts, found):
    """(tiers of the run, left out) from every node's {"tiers": [...], "seen": {path: [hosts]}}, in host order: the
    tiers every node has under the same name and path, shared when every node saw every node's marker there."""
    first = found[0]["tiers"]
    tiers, left_out = [], {}
    for tier in first:
        on = [h for h, doc in zip(hosts, found)
              if any(t["name"] == tier["name"] and t["path"] == tier["path"] for t in doc["tiers"])]
        if len(on) < len(hosts):
            left_out[tier["name"]] = "%s is not on every node: only on %s" % (tier["path"], ", ".join(on))
            continue
        shared = all(sorted(doc["seen"].get(tier["path"]) or []) == sorted(hosts) for doc in found)
        tiers.append({"name": tier["name"], "path": tier["path"], "shared": shared, "fstype": tier.get("fstype"),
                      "mount_point": tier.get("mount_point")})
    for doc in found[1:]:
        for tier in doc["tiers"]:
            if tier["name"] not in left_out and not any(t["name"] == tier["name"] for t in tiers):
                left_out[tier["name"]] = "%s is not on every node: not on %s" % (tier["path"], hosts[0])
    return tiers, left_out


def run(art, params, out_dir):
    host = art.host
    hosts = list(params["hosts"] or [host])
    tiers, left_out = storage_tier.discover_tiers(storage_tier.node_mounts())
    problems = _write_markers(tiers, art.run_id, host)
    for path, why in problems.items():
        left_out[path] = why
    tiers = [t for t in tiers if t["path"] not in problems]
    mesh = None
    try:
        if len(hosts) > 1:
            port = port_param(params, "port", art.run_id, "storage_tiers")
            mesh = Mesh(hosts, [str(a) for a in (params["addresses"] or hosts)], params["rank"], port,
                        "%s:storage_tiers:%d" % (art.run_id, port), connect_timeout=params["rdzv_timeout"])
            missing = mesh.barrier("markers-written", params["rdzv_timeout"], abort_on_lost=True)
            if missing:
                raise StoreError("%s did not write their markers in %g s" % (", ".join(missing),
                                                                            params["rdzv_timeout"]))
        seen = _seen(tiers, art.run_id)
        mine = {"tiers": tiers, "seen": seen}
        if mesh is not None:
            # every node has read the markers once it posts what it saw: only then are they removed (finally)
            found = [json.loads(v) for v in mesh.allgather(json.dumps(mine), params["rdzv_timeout"])]
        else:
            found = [mine]
    except StoreError as exc:
        art.error("the nodes did not meet to compare their tiers: %s" % exc)
        return
    finally:
        _remove_markers(tiers, art.run_id, host)
        if mesh is not None:
            mesh.close()
    chosen, run_left_out = run_tiers(hosts, found)
    art.facts.update(tiers=json.dumps(tiers), seen=json.dumps(seen), left_out=json.dumps(left_out),
                     run_tiers=json.dumps(chosen), run_left_out=json.dumps(run_left_out))
    for tier in chosen:
        art.add("tier_hosts_sharing", len(seen.get(tier["path"]) or []), "count", tier=tier["name"])
    if not chosen:
        art.error("no storage tier is on every node: %s" % (json.dumps(run_left_out) or "none found"))
