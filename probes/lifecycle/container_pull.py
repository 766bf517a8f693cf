"""container_pull: how long pulling container images takes with the engines this node has (seed, "Lifecycle":
containers from Docker Hub, ghcr.io and nvcr.io).

Engines, each used when present: docker (its daemon must answer), podman (into a storage root of its own, so the
pull is really a pull and the node's images are untouched), enroot (`enroot import` to a squashfs file) and
apptainer/singularity (`pull` to a SIF file), the last two with cache and temp directories of their own. Before an
image is pulled its registry is checked for reachability with a short timeout; an image docker already has is not
timed (its "pull" would not download anything, and the node's images are never removed). Results: pull_s and
image_bytes per engine and image. Everything pulled is removed afterwards, also after a failure or a timeout.

pull_mbps is the bytes the node's interfaces received during the pull (/proc/net/dev: what came over the wire,
compressed layers and all; wire_bytes) over the pull's time. Each byte is counted once (common.wire_interfaces):
interfaces stack (a NIC under a bridge, bond members and the bond, a VLAN and its parent) and every level counts the
same bytes, so the sum over all of them read a 200 Mbit/s pull as 400. Counted: the interface the routing table sends
the registry's address through (the one the connection that checked its reachability opened to); else the physical
interfaces; else, with none (a container's veth), those that are not a bridge, a bond or stacked on another.
facts.rx_interfaces[registry] says which were counted, by which rule, and why each other one was not.
The image's size is not the transfer: docker reports the unpacked size (ubuntu:24.04: about 78 MB unpacked for about
30 MB pulled, a rate 2.6 times too high), and layers a node already holds are not downloaded. Other traffic of the
node on the counted interfaces in the same seconds counts too (the lifecycle role takes the hosts one at a time, so
the assessment's own is small). A pull that received under
MIN_WIRE_BYTES downloaded next to nothing (its layers were there): no rate. Where the counters cannot be read, the
image's size is used and labelled (bytes=image), as an upper bound (bound=at_most, note): a grader never passes it
as a measured rate.

A pull that reaches `pull_timeout_s` is measured as far as it went: the bytes received until the timeout (or, without
counters, those written into the probe's own directory by podman, enroot, apptainer) give pull_mbps as an upper
bound (labels bound=at_most, note) and pull_s as a lower one (bound=at_least). Every other failed pull (an error of
the engine; docker's timeout without counters, its bytes in the daemon's store) is in facts.failures and
facts.unmeasured (the metrics it would have given, its labels, why), so that the grader gives it a row of its own.
"""

import json
import os
import shutil
import time

from probes.common import tiers as storage_tier
from probes.common.command import run_cmd
from probes.lifecycle import common as lifecycle
from probes.params import Param, Params

PARAMS = Params(
    images=Param(list, ["docker.io/library/busybox:latest"], "image references to pull"),
    engines=Param(list, ["docker", "podman", "enroot", "apptainer"], "engines to pull with, each where installed"),
    work_dir=Param(str, None, "where pulls go (default: lifecycle/containers beside the artifacts' directory)"),
    pull_timeout_s=Param(float, 1800, "seconds per pull"),
    reach_timeout_s=Param(float, 3, "seconds for the TCP connection that checks a registry is reachable"),
    proc_root=Param(str, "/proc", "where procfs is (net/dev, net/route, net/ipv6_route)"),
    sys_root=Param(str, "/sys", "where sysfs is (class/net)"),
)
MIN_WIRE_BYTES = 1_000_000  # a pull that received less downloaded next to nothing: no rate from it


def registry_of(image):
    """(registry host, path:tag) of an image reference; Docker Hub for a bare name."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "docker.io", image if rest else "library/" + image


def registry_url(registry):
    return "https://%s/v2/" % ("registry-1.docker.io" if registry == "docker.io" else registry)


def _find(name):
    if name == "apptainer":
        return shutil.which("apptainer") or shutil.which("singularity")
    return shutil.which(name)


def _pull_argv(engine, exe, image, work):
    registry, path = registry_of(image)
    if engine == "docker":
        return [exe, "pull", "--quiet", image], None
    if engine == "podman":
        return [exe, "--root", os.path.join(work, "root"), "--runroot", os.path.join(work, "runroot"), "pull",
                "--quiet", image], None
    if engine == "enroot":
        ref = "docker://%s" % path if registry == "docker.io" else "docker://%s#%s" % (registry, path)
        return [exe, "import", "--output", os.path.join(work, "image.sqsh"), ref], os.path.join(work, "image.sqsh")
    return [exe, "pull", "--force", os.path.join(work, "image.sif"), "docker://%s" % image], \
        os.path.join(work, "image.sif")


def _env(engine, work):
    env = dict(os.environ)
    if engine == "podman":
        env["TMPDIR"] = os.path.join(work, "tmp")  # where podman downloads blobs (else /var/tmp): counted at a timeout
    elif engine == "enroot":
        for var, sub in (("ENROOT_CACHE_PATH", "cache"), ("ENROOT_DATA_PATH", "data"), ("ENROOT_TEMP_PATH", "tmp")):
            env[var] = os.path.join(work, sub)
    elif engine == "apptainer":
        for var in ("APPTAINER_CACHEDIR", "SINGULARITY_CACHEDIR"):
            env[var] = os.path.join(work, "cache")
        for var in ("APPTAINER_TMPDIR", "SINGULARITY_TMPDIR"):
            env[var] = os.path.join(work, "tmp")
    return env


def _partial_bytes(engine, work):
    """Bytes a pull that was stopped had written under its own directory (podman's storage and TMPDIR, enroot's and
    apptainer's cache, temp and output); None for docker, whose daemon keeps them in its own store. Layers counted
    both as downloaded blobs and unpacked only make the rate's upper bound higher, never a slow link look slower."""
    return None if engine == "docker" else lifecycle.tree_bytes(work)


def _docker_has(exe, image):
    return run_cmd([exe, "image", "inspect", image], timeout=30).rc == 0


def _docker_size(exe, image):
    res = run_cmd([exe, "image", "inspect", "--format", "{{json .Size}}", image], timeout=30)
    try:
        return int(json.loads(res.stdout)) if res.rc == 0 else None
    except ValueError:
        return None


def run(art, p, out_dir):
    work_root = p["work_dir"] or os.path.join(os.path.dirname(os.path.abspath(out_dir)), "lifecycle", "containers")
    engines, skipped_engines = {}, {}
    for name in p["engines"]:
        exe = _find(name)
        if not exe:
            skipped_engines[name] = "not installed"
            continue
        if name == "docker":
            res = run_cmd([exe, "info", "--format", "{{.ServerVersion}}"], timeout=20)
            if res.rc != 0:
                skipped_engines[name] = "docker daemon not reachable: %s" % (lifecycle.tail(res.stderr) or "timed out")
                continue
        engines[name] = exe
    art.facts.update({"engines": engines, "skipped_engines": skipped_engines, "images": list(p["images"])})
    if not engines:
        art.skip("no usable container engine on this node (%s)" % "; ".join(
            "%s: %s" % kv for kv in sorted(skipped_engines.items())))
        return
    reach, skipped, failures, unmeasured, rx_interfaces = {}, {}, {}, [], {}
    art.facts["rx_interfaces"] = rx_interfaces
    for image in p["images"]:
        registry, _ = registry_of(image)
        if registry not in reach:
            reach[registry] = lifecycle.connect(registry_url(registry), p["reach_timeout_s"])
            if reach[registry][0]:
                rx_interfaces[registry] = lifecycle.wire_interfaces(reach[registry][2], p["proc_root"],
                                                                    p["sys_root"])[1]
        ok, why, _ = reach[registry]
        if not ok:
            skipped[image] = "registry %s not reachable: %s" % (registry, why)
            continue
        for engine, exe in sorted(engines.items()):
            key = "%s %s" % (engine, image)
            if engine == "docker" and _docker_has(exe, image):
                skipped[key] = "already present in docker's image store: a pull would not be measured"
                continue
            work = os.path.join(work_root, engine)
            pulled = False
            try:
                os.makedirs(os.path.join(work, "tmp"), exist_ok=True)
                argv, out_file = _pull_argv(engine, exe, image, work)
                counted = rx_interfaces[registry]["counted"]
                rx0 = lifecycle.received_bytes(counted, p["proc_root"])
                t0 = time.perf_counter()
                res = run_cmd(argv, timeout=p["pull_timeout_s"], env=_env(engine, work))
                secs = time.perf_counter() - t0
                rx1 = lifecycle.received_bytes(counted, p["proc_root"])
                wire = rx1 - rx0 if rx0 is not None and rx1 is not None and rx1 >= rx0 else None
                pulled = engine == "docker"
                failed = lifecycle.failure(res, p["pull_timeout_s"])
                labels = {"engine": engine, "image": image, "registry": registry}
                if failed:
                    failures[key] = failed
                    got = (wire if wire is not None else _partial_bytes(engine, work)) if res.timed_out else 0
                    if got:
                        # a pull that reached the timeout moved `got` bytes in `secs`: its rate was at most that,
                        # and a registry too slow to finish is the finding (graded as a bound)
                        note = "timed out after %g s with %d bytes received (%s)" % (
                            p["pull_timeout_s"], got, "the node's interfaces" if wire is not None
                            else "the part-pulled image")
                        art.add("pull_s", round(secs, 3), "s", bound="at_least", note=note, **labels)
                        art.add("pull_mbps", round(got * 8 / secs / 1e6, 3), "Mbit/s", bound="at_most", note=note,
                                **labels)
                    else:
                        if res.timed_out:
                            failed += (" (docker keeps what it pulled in its own store: the bytes received, and so a "
                                       "bound on the rate, are unknown)" if engine == "docker"
                                       else " with nothing received")
                            failures[key] = failed
                        unmeasured.append({"metrics": ["pull_s", "pull_mbps", "image_bytes"], "labels": labels,
                                           "why": failed})
                    continue
                size = _docker_size(exe, image) if engine == "docker" else (
                    os.path.getsize(out_file) if out_file and os.path.exists(out_file)
                    else lifecycle.tree_bytes(work))
                art.add("pull_s", round(secs, 3), "s", **labels)
                if size:
                    art.add("image_bytes", size, "B", **labels)
                if wire is not None:
                    art.add("wire_bytes", wire, "B", **labels)
                    if wire >= MIN_WIRE_BYTES:
                        art.add("pull_mbps", round(wire * 8 / secs / 1e6, 3), "Mbit/s", bytes="received", **labels)
                    else:
                        skipped[key] = ("pulled in %.1f s but received %d bytes: its layers were on the node already, "
                                        "no rate" % (secs, wire))
                elif size:
                    # no counters: the image's size is more than came over the wire (docker's is unpacked; layers
                    # the node held were not pulled), so the rate is an upper bound, judged as one
                    art.add("pull_mbps", round(size * 8 / secs / 1e6, 3), "Mbit/s", bytes="image", bound="at_most",
                            note="from the image's size (no interface counters): fewer bytes came over the wire",
                            **labels)
            finally:
                if pulled:
                    run_cmd([exe, "rmi", "--force", image], timeout=120)
                if engine == "podman":
                    run_cmd([exe, "--root", os.path.join(work, "root"), "--runroot", os.path.join(work, "runroot"),
                             "rmi", "--all", "--force"], timeout=120)
                storage_tier.remove_tree(work, stop_at=work_root)
    art.facts.update({"skipped": skipped, "failures": failures, "unmeasured": unmeasured})
    if not art.results:
        if failures:
            art.error("every pull failed: %s" % "; ".join("%s: %s" % kv for kv in sorted(failures.items())[:3]))
        else:
            art.skip("nothing pulled: %s" % "; ".join("%s: %s" % kv for kv in sorted(skipped.items())))
