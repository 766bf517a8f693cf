"""model_pull: how long downloading a model takes from Hugging Face and from ModelScope (seed, "Lifecycle": pull a
model from Hugging Face and ModelScope), through their Python clients as a user would.

Per hub: the client must be importable by the node's Python (`huggingface_hub`, `modelscope`) and the hub must
answer a TCP connection within `reach_timeout_s`; otherwise that hub is skipped with the reason. The download runs
in a child process (killed with its group at `timeout_s`) into a fresh cache directory of its own, so nothing of the
node's cache is reused or touched; the cache is removed afterwards, also after a failure or a timeout.
Results per hub and model: download_s (inside the client's snapshot_download), process_s (the whole child: Python
start and the client's import included, what a user waits for), model_bytes and download_mbps (over download_s).
A download that reaches `timeout_s` is measured as far as it went: the bytes written by then over the seconds give
download_mbps as an upper bound (labels bound=at_most, note) and process_s as a lower one (bound=at_least). Any
other failed download is in facts.failures and facts.unmeasured (the metrics it would have given, its labels, why),
so that the grader gives it a row of its own.
"""

import json
import os
import sys
import time

from probes.common import tiers as storage_tier
from probes.common.command import run_cmd
from probes.lifecycle import common as lifecycle
from probes.params import Param, Params

PARAMS = Params(
    model=Param(str, "Qwen/Qwen2.5-0.5B-Instruct", "model repository to download"),
    hubs=Param(list, ["huggingface", "modelscope"], "hubs to download from"),
    allow_patterns=Param(list, [], "file patterns to download (empty: the whole repository)"),
    hf_endpoint=Param(str, "", "Hugging Face endpoint (default: $HF_ENDPOINT, else https://huggingface.co)"),
    modelscope_endpoint=Param(str, "https://www.modelscope.cn", "ModelScope endpoint"),
    python=Param(str, None, "the Python whose hub clients download (default: this one)"),
    work_dir=Param(str, None, "where downloads go (default: lifecycle/models beside the artifacts' directory)"),
    timeout_s=Param(float, 1800, "seconds per download"),
    reach_timeout_s=Param(float, 3, "seconds for the TCP connection that checks a hub is reachable"),
)
CLIENTS = {"huggingface": "huggingface_hub", "modelscope": "modelscope"}
# One script for both clients: argv = hub, model, cache dir, JSON list of patterns (empty: the whole repository).
SCRIPT = r"""
import json, sys, time
hub, model, cache, patterns = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]) or None
if hub == "huggingface":
    from huggingface_hub import snapshot_download
    t0 = time.perf_counter()
    path = snapshot_download(repo_id=model, cache_dir=cache, allow_patterns=patterns)
else:
    from modelscope import snapshot_download
    t0 = time.perf_counter()
    try:
        path = snapshot_download(model, cache_dir=cache, allow_patterns=patterns)
    except TypeError:
        path = snapshot_download(model, cache_dir=cache, allow_file_pattern=patterns)
print(json.dumps({"path": path, "download_s": time.perf_counter() - t0}))
"""


def hub_url(hub, p):
    if hub == "huggingface":
        return p["hf_endpoint"] or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    return p["modelscope_endpoint"] or "https://www.modelscope.cn"


def run(art, p, out_dir):
    python = p["python"] or sys.executable
    work_root = p["work_dir"] or os.path.join(os.path.dirname(os.path.abspath(out_dir)), "lifecycle", "models")
    skipped, failures, unmeasured = {}, {}, []
    art.facts.update({"model": p["model"], "allow_patterns": list(p["allow_patterns"]), "python": python})
    for hub in p["hubs"]:
        if hub not in CLIENTS:
            raise ValueError("hubs: huggingface or modelscope, got %r" % hub)
        if run_cmd([python, "-c", "import %s" % CLIENTS[hub]], timeout=120).rc != 0:
            skipped[hub] = "the %s client is not installed for %s" % (CLIENTS[hub], python)
            continue
        url = hub_url(hub, p)
        ok, why = lifecycle.reachable(url, p["reach_timeout_s"])
        if not ok:
            skipped[hub] = "%s not reachable: %s" % (url, why)
            continue
        work = os.path.join(work_root, hub)
        env = dict(os.environ, HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=os.path.join(work, "home"),
                   MODELSCOPE_CACHE=os.path.join(work, "home"))
        if hub == "huggingface" and p["hf_endpoint"]:
            env["HF_ENDPOINT"] = p["hf_endpoint"]
        try:
            os.makedirs(work, exist_ok=True)
            cache = os.path.join(work, "cache")
            t0 = time.perf_counter()
            res = run_cmd([python, "-c", SCRIPT, hub, p["model"], cache, json.dumps(p["allow_patterns"])],
                          timeout=p["timeout_s"], env=env)
            secs = time.perf_counter() - t0
            failed = lifecycle.failure(res, p["timeout_s"])
            labels = {"hub": hub, "model": p["model"]}
            if failed:
                # everything the child wrote (the model's part-files and the client's own chunk cache): counting
                # more than the model's bytes makes the rate's upper bound higher, never a slow hub look slower
                got = lifecycle.tree_bytes(work) if res.timed_out else 0
                if got:
                    note = "timed out after %g s with %d bytes received" % (p["timeout_s"], got)
                    failures[hub] = note
                    art.add("process_s", round(secs, 3), "s", bound="at_least", note=note, **labels)
                    art.add("download_mbps", round(got * 8 / secs / 1e6, 3), "Mbit/s", bound="at_most", note=note,
                            **labels)
                else:
                    failures[hub] = failed + (" with nothing received" if res.timed_out else "")
                    unmeasured.append({"metrics": ["download_s", "process_s", "model_bytes", "download_mbps"],
                                       "labels": labels, "why": failures[hub]})
                continue
            try:
                inner = float(json.loads(res.stdout.strip().splitlines()[-1])["download_s"])
            except (ValueError, KeyError, IndexError):
                inner = secs
            # the model's files only: HF_HOME beside it may hold the hub client's own copies (hf_xet's chunk cache,
            # HF_HOME/xet), which would count its bytes twice
            size = lifecycle.tree_bytes(cache)
            art.add("download_s", round(inner, 3), "s", **labels)
            art.add("process_s", round(secs, 3), "s", **labels)
            art.add("model_bytes", size, "B", **labels)
            if inner > 0:
                art.add("download_mbps", round(size * 8 / inner / 1e6, 3), "Mbit/s", **labels)
        finally:
            storage_tier.remove_tree(work, stop_at=work_root)
    art.facts.update({"skipped": skipped, "failures": failures, "unmeasured": unmeasured})
    if not art.results:
        if failures:
            art.error("every download failed: %s" % "; ".join("%s: %s" % kv for kv in sorted(failures.items())))
        else:
            art.skip("no model hub could be used: %s" % "; ".join("%s: %s" % kv for kv in sorted(skipped.items())))
