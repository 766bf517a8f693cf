"""Join the slices of one run into that run: AWX job slicing, or `--limit` slices that share an `assess_run_id`.

A fleet outgrows one controller: a job template sliced N ways runs the playbook as N jobs, each over its own part
of the inventory, on N execution nodes. Each slice is given the same `assess_run_id` and its own
`assess_run_slice`, and writes a whole run directory of its own under the run's (its request, journal, run.json,
report and its hosts' artifacts)::

    <output>/<provider>/<run id>/slices/<slice>/

:func:`merge` writes the run itself into ``<run id>/``, from the slices, so that one build judges every host at once
(the cross-host checks, consistency and stragglers, see every slice):

- ``artifacts/<host>/``: each host from the one slice that assessed it (a host in two slices is an error naming
  both; it would be counted twice). Linked, not copied, where the filesystem allows.
- any other directory a slice wrote (``kubernetes/`` …), by path; one path with different content in two slices
  is an error naming the path, except under ``kubernetes/``: the audit reads the cluster's objects once per slice
  (run_once), seconds apart, so two reads differ; the best copy is kept (a read over kubectl's failure, then the
  latest by its slice's journal) and run.json's ``notes`` say which.
- ``assess_run.json``: the run's request, its hosts the slices' hosts in slice order.
- ``journal.jsonl``: every slice's lines, each marked with its slice, in time order.
- ``run.json``: hosts, per-host stats and the unreachable and failed hosts of every slice; the earliest start and
  the last end; interrupted when a slice was (a slice without run.json has not ended, or was killed);
  ``slices``: each slice's name, hosts and whether it ended; ``copied_from_slices``: the top-level entries the merge
  copied (what the next merge replaces); ``notes``: what the merge chose (a kubernetes/ file kept from one slice).

A merge takes an flock of ``<run id>/.merge.lock``: the last two slices of an AWX run may end at the same moment and
both merge. Merging again (a slice that ended later) rewrites what the last merge wrote, from the slices: its run
files, ``report/`` and the entries its run.json lists in ``copied_from_slices``. Anything else in the run directory
was put there by someone else (``analyst.yml``, ``reference/cmax/`` from compare-cmax, ``regrade/``) and is left as it
is. A run directory that holds a run of its own (no ``slices`` in its run.json) is never touched.
"""

import fcntl
import json
import os
import shutil
from contextlib import contextmanager

from reports.load import read_journal, read_json_or_problem

SLICES_DIR = "slices"
LOCK_NAME = ".merge.lock"
# A slice's run-level files: merged into the run's own, not copied.
RUN_FILES = ("assess_run.json", "run.json", "journal.jsonl")
# Per slice, not the run's: its own report (the merge builds the run's) and its own probes.pyz.
NOT_MERGED = ("report", "probes.pyz", LOCK_NAME)
IDENTITY = ("id", "provider", "profile")
# What the build writes into the merged run (from what the merge wrote): replaced on every merge.
REPORT_DIR = "report"
# Top-level directories whose files each slice reads for itself (the audit's run_once kubectl reads): where slices
# differ, the best copy is kept (_read_rank), not refused.
READ_PER_SLICE = ("kubernetes",)


class MergeError(ValueError):
    """The slices cannot be joined into one run (the message names the slice, host or path)."""


def slice_names(run_dir):
    """The run's slices, in name order ([] when it has none)."""
    path = os.path.join(run_dir, SLICES_DIR)
    if not os.path.isdir(path):
        return []
    return sorted(name for name in os.listdir(path)
                  if not name.startswith(".") and os.path.isdir(os.path.join(path, name)))


def _read_json(path, what):
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as ex:
        raise MergeError("%s: %s is unreadable: %s" % (what, path, ex)) from None
    if not isinstance(doc, dict):
        raise MergeError("%s: %s is not a JSON object" % (what, path))
    return doc


@contextmanager
def _merge_lock(run_dir):
    fd = os.open(os.path.join(run_dir, LOCK_NAME), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:  # another filesystem, or one without hard links
        shutil.copy2(src, dst)


def _same_file(a, b):
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def _read_slice(run_dir, name):
    path = os.path.join(run_dir, SLICES_DIR, name)
    request = _read_json(os.path.join(path, "assess_run.json"), "slice %s" % name)
    if request is None:
        raise MergeError("slice %s: %s has no assess_run.json (not a run's slice, or its preflight never made it)"
                         % (name, path))
    summary = _read_json(os.path.join(path, "run.json"), "slice %s" % name)
    artifacts = os.path.join(path, "artifacts")
    hosts = list(request.get("hosts") or [])
    if os.path.isdir(artifacts):
        hosts += sorted(h for h in os.listdir(artifacts) if h not in hosts and not h.startswith("."))
    return {"name": name, "path": path, "request": request, "summary": summary, "hosts": hosts,
            "journal": read_journal(os.path.join(path, "journal.jsonl"))}


def _check(run_dir, slices):
    """The slices are parts of this run, and no host is in two of them."""
    run_id = os.path.basename(run_dir)
    first = slices[0]
    for part in slices:
        for key in IDENTITY:
            if part["request"].get(key) != first["request"].get(key):
                raise MergeError("slices %s and %s are not parts of one run: their %s is %r and %r" % (
                    first["name"], part["name"], key, first["request"].get(key), part["request"].get(key)))
        if part["request"].get("id") != run_id:
            raise MergeError("slice %s belongs to run %r, not %r" % (part["name"], part["request"].get("id"), run_id))
    seen = {}
    for part in slices:
        for host in part["hosts"]:
            if host in seen:
                raise MergeError("host %s is in slices %s and %s: each host must be assessed by one slice"
                                 % (host, seen[host], part["name"]))
            seen[host] = part["name"]


def _merged_before(run_dir):
    """Whether what the run directory holds besides its slices is a merge's (or nothing): True, False, or None for
    nothing there yet."""
    summary = _read_json(os.path.join(run_dir, "run.json"), "run %s" % os.path.basename(run_dir))
    if summary is not None:
        return "slices" in summary
    others = [n for n in os.listdir(run_dir) if n not in (SLICES_DIR, LOCK_NAME)]
    return None if not others else False


def _read_rank(path, rel, part):
    """How good a slice's copy of a READ_PER_SLICE file is (the higher is kept): a read (a JSON object) over a failed
    one (the audit keeps kubectl's failure as {"error": ...}) over an unreadable one (cut short); then the later
    read, by the slice's journal: its lines of the tasks that read and kept <name>.txt carry the loop item <name>.
    Not the file's mtime: a copy sets that (AWX's artifact collection, rsync without -t, cp), so the newest file
    need not be the newest read, and a newest read that failed would hide a good one."""
    doc, problem = read_json_or_problem(path)
    standing = 0 if problem or not isinstance(doc, dict) else 1 if "error" in doc else 2
    name = os.path.splitext(os.path.basename(rel))[0]
    read_at = max((str(line.get("ts") or "") for line in part["journal"]
                   if line.get("item") == name and line.get("status") in ("ok", "changed")), default="")
    return standing, read_at


def _copy_tree(part, run_dir, entry, origin, differing, parts):
    """The slice's entry into run_dir/entry, file by file. origin: path relative to the run -> the slice whose copy is
    there (a conflict names both); differing: such a path under READ_PER_SLICE -> every slice whose copy differed;
    parts: slice name -> slice."""
    slice_dir, slice_name = part["path"], part["name"]
    src = os.path.join(slice_dir, entry)
    for root, dirs, files in os.walk(src):
        rel_root = os.path.relpath(root, slice_dir)
        os.makedirs(os.path.join(run_dir, rel_root), exist_ok=True)
        for name in files:
            rel = os.path.normpath(os.path.join(rel_root, name))
            source, target = os.path.join(root, name), os.path.join(run_dir, rel)
            if os.path.exists(target):
                if _same_file(source, target):
                    continue
                if entry not in READ_PER_SLICE:
                    raise MergeError("%s differs between slices %s and %s" % (rel, origin.get(rel, "?"), slice_name))
                differing.setdefault(rel, [origin.get(rel, "?")]).append(slice_name)
                if _read_rank(source, rel, part) < _read_rank(target, rel, parts[origin[rel]]):
                    continue  # the copy there is better; a tie goes to the later slice
                os.unlink(target)
            _link_or_copy(source, target)
            origin[rel] = slice_name
        dirs.sort()


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _copied_before(run_dir):
    """The top-level entries the last merge copied from the slices (its run.json's ``copied_from_slices``)."""
    summary = _read_json(os.path.join(run_dir, "run.json"), "run %s" % os.path.basename(run_dir)) or {}
    names = summary.get("copied_from_slices") or []
    # only plain names inside the run: never the slices, the lock or a path outside
    return [n for n in names if isinstance(n, str) and n == os.path.basename(n)
            and n not in ("", ".", "..", SLICES_DIR, LOCK_NAME)]


def _to_copy(part):
    """The top-level directories of a slice that the merge copies into the run."""
    return [name for name in sorted(os.listdir(part["path"]))
            if name not in RUN_FILES and name not in NOT_MERGED and not name.startswith(".")
            and os.path.isdir(os.path.join(part["path"], name))]


def _write_json(path, doc):
    temp = "%s.%d.tmp" % (path, os.getpid())
    with open(temp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    os.replace(temp, path)


def _run_summary(run_id, slices, hosts):
    ended = [s["summary"] for s in slices if s["summary"] is not None]
    stats, unreachable, failed = {}, [], []
    for doc in ended:
        for host, counts in (doc.get("stats") or {}).items():
            # a node is in one slice; the controller's own tasks (localhost) are in each, and add up
            mine = stats.setdefault(host, {})
            for key, value in (counts or {}).items():
                mine[key] = mine.get(key, 0) + int(value or 0)
        unreachable += doc.get("unreachable_hosts") or []
        failed += doc.get("failed_hosts") or []
    first = ended[0] if ended else {}
    starts = [s["request"].get("started_at") for s in slices if s["request"].get("started_at")]
    ends = [d.get("finished_at") for d in ended if d.get("finished_at")]
    return {
        "schema": first.get("schema", "clustermax.assess/run/v1"),
        "run_id": run_id,
        "provider": slices[0]["request"].get("provider"),
        "profile": slices[0]["request"].get("profile"),
        "playbook": first.get("playbook"),
        "started_at": min(starts) if starts else None,
        "finished_at": max(ends) if ends else None,
        "ansible_version": first.get("ansible_version"),
        "collection_version": first.get("collection_version"),
        "hosts": sorted(hosts),
        "stats": dict(sorted(stats.items())),
        "unreachable_hosts": sorted(set(unreachable)),
        "failed_hosts": sorted(set(failed)),
        # a slice that has not ended (no run.json) leaves the run incomplete: its hosts' later phases are missing
        "interrupted": len(ended) < len(slices) or any(d.get("interrupted") for d in ended),
        "slices": [{"slice": s["name"], "hosts": s["hosts"], "ended": s["summary"] is not None,
                    "interrupted": bool((s["summary"] or {}).get("interrupted", True))} for s in slices],
    }


def merge(run_dir):
    """Join the run's slices into it (see the module's text). Returns the merged run.json document."""
    run_dir = os.path.abspath(run_dir)
    if not os.path.isdir(run_dir):
        raise MergeError("run directory %s does not exist" % run_dir)
    names = slice_names(run_dir)
    if not names:
        raise MergeError("%s has no slices (%s/<slice>/): nothing to merge" % (run_dir, SLICES_DIR))
    own = MergeError("%s holds a run of its own besides its slices (its run.json names no slices): not merged over"
                     % run_dir)
    if _merged_before(run_dir) is False:
        raise own  # before the lock file too: nothing is added to such a directory
    with _merge_lock(run_dir):
        if _merged_before(run_dir) is False:
            raise own
        slices = [_read_slice(run_dir, name) for name in names]
        _check(run_dir, slices)
        # What the last merge wrote goes (the slices hold everything it came from), and what this one copies; the
        # run files are replaced in place. Anything else someone put in the run directory stays.
        copied = sorted({name for part in slices for name in _to_copy(part)})
        for name in sorted(set(_copied_before(run_dir)) | set(copied) | {REPORT_DIR}):
            _remove(os.path.join(run_dir, name))
        origin, differing, hosts = {}, {}, []
        by_name = {s["name"]: s for s in slices}
        for part in slices:
            hosts += part["hosts"]
            for name in _to_copy(part):
                _copy_tree(part, run_dir, name, origin, differing, by_name)
        request = dict(slices[0]["request"], hosts=hosts, slices=names)
        request.pop("slice", None)
        _write_json(os.path.join(run_dir, "assess_run.json"), request)
        lines = [dict(line, slice=part["name"]) for part in slices for line in part["journal"]]
        lines.sort(key=lambda line: str(line.get("ts") or ""))  # stable: a slice's own order where times tie
        temp = os.path.join(run_dir, ".journal.jsonl.%d.tmp" % os.getpid())
        with open(temp, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        os.replace(temp, os.path.join(run_dir, "journal.jsonl"))
        summary = _run_summary(os.path.basename(run_dir), slices, hosts)
        summary["copied_from_slices"] = copied
        summary["notes"] = ["%s differs between slices %s: kept %s's copy, the best read (each slice reads it for "
                            "itself)" % (rel, ", ".join(names), origin[rel])
                            for rel, names in sorted(differing.items())]
        _write_json(os.path.join(run_dir, "run.json"), summary)
        return summary


def text(summary):
    """What `assess-report merge` prints before the build's summary."""
    lines = ["run %s: %d slice(s), %d host(s)" % (summary["run_id"], len(summary["slices"]), len(summary["hosts"]))]
    for part in summary["slices"]:
        state = "ended" if part["ended"] and not part["interrupted"] else (
            "interrupted" if part["ended"] else "not ended (no run.json)")
        lines.append("  slice %s: %d host(s), %s" % (part["slice"], len(part["hosts"]), state))
    lines += ["  note: %s" % note for note in summary.get("notes") or []]
    return "\n".join(lines)
