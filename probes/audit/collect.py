"""The audit's collection machinery: sources run in parallel threads, every command with its own timeout.

A *source* is one thing the audit reads (a command such as `nvidia-smi -q -x`, or a group of /proc and /sys
files). Each records how it went in `Collector.sources[name]`: status ok, missing (tool not installed),
not_permitted, timeout, error or not_applicable, with a reason and its duration. The controller turns those into
skip / error rows with the reason, so a check whose data is missing is shown, never dropped.

Nothing here decides pass or fail; nothing here writes anywhere but the probe's own output directory.
"""

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from probes.common.command import run_cmd

# Messages tools print when the caller lacks privileges (root-only files, kernel buffers, sockets).
_NOT_PERMITTED = re.compile(
    r"permission denied|operation not permitted|must be root|insufficient permissions|not permitted|"
    r"only root|access denied|are you root|requires root|no hostkeys available|Insufficient Permissions",
    re.IGNORECASE)
# A plain, predictable locale for every tool: parsers read English, C-formatted output.
_ENV = dict(os.environ, LC_ALL="C", LANG="C")
_ENV.pop("LANGUAGE", None)


def not_permitted_text(text):
    return bool(_NOT_PERMITTED.search(text or ""))


class Collector:
    """Shared state of one audit collection; thread-safe."""

    def __init__(self, out_dir, default_timeout=10.0, prefix="audit"):
        self.out_dir = out_dir
        self.default_timeout = float(default_timeout)
        self.prefix = prefix
        self.sources = {}
        self.raw = []
        self._lock = threading.Lock()
        self.is_root = os.geteuid() == 0

    # ---- recording -------------------------------------------------------------------------------------------

    def mark(self, source, status, reason=None, duration_s=None, **extra):
        entry = {"status": status, "reason": reason}
        if duration_s is not None:
            entry["duration_s"] = round(duration_s, 3)
        entry.update(extra)
        with self._lock:
            self.sources[source] = entry

    def status(self, source):
        with self._lock:
            return (self.sources.get(source) or {}).get("status")

    def save_raw(self, name, text):
        """Keep a large raw output beside the artifact. Never named *.json: the loader reads those as artifacts."""
        if text is None:
            return None
        fname = "%s.%s" % (self.prefix, re.sub(r"[^A-Za-z0-9_.-]", "_", name))
        if fname.endswith(".json"):
            fname += ".txt"
        with open(os.path.join(self.out_dir, fname), "w", encoding="utf-8") as fh:
            fh.write(text)
        with self._lock:
            if fname not in self.raw:
                self.raw.append(fname)
        return fname

    # ---- running commands ------------------------------------------------------------------------------------

    def cmd(self, source, argv, timeout=None, ok_rcs=(0,), record=True):
        """Run argv; record the source's status. Returns the CmdResult (rc None when it did not run)."""
        t0 = time.monotonic()
        res = run_cmd(argv, timeout=timeout or self.default_timeout, env=_ENV)
        took = time.monotonic() - t0
        if not record:
            return res
        if res.missing:
            self.mark(source, "missing", "%s not found" % argv[0], took)
        elif res.timed_out:
            limit = timeout or self.default_timeout
            self.mark(source, "timeout", "%s timed out after %gs" % (" ".join(argv[:3]), limit), took)
        elif res.rc is None:
            self.mark(source, "error", res.stderr.strip()[:300] or "could not start %s" % argv[0], took)
        elif res.rc not in ok_rcs:
            text = (res.stderr.strip() or res.stdout.strip())
            first = text.splitlines()[0][:300] if text else "no output"
            status = "not_permitted" if not_permitted_text(text) else "error"
            self.mark(source, status, "%s exit %s: %s" % (os.path.basename(argv[0]), res.rc, first), took, rc=res.rc)
        else:
            self.mark(source, "ok", None, took)
        return res

    # ---- running sources in parallel -------------------------------------------------------------------------

    def run_all(self, tasks, workers=16, deadline_s=60.0):
        """tasks: list of (section name, fn(collector) -> dict). Returns {section: facts}.

        Each task runs in a worker thread; a task that raises becomes an error source named after it (its section
        is missing), a task still running at the deadline is recorded as a timeout and left behind (its
        commands carry their own timeouts, so it ends soon after)."""
        results = {}
        pool = ThreadPoolExecutor(max_workers=max(1, int(workers)))
        futures = {}
        started = {}
        for name, fn in tasks:
            started[name] = time.monotonic()
            futures[name] = pool.submit(fn, self)
        end = time.monotonic() + deadline_s
        for name, fut in futures.items():
            left = max(0.0, end - time.monotonic())
            try:
                value = fut.result(timeout=left)
            except Exception as exc:  # noqa: BLE001 - a broken section is data, the others go on
                if fut.done():
                    self.mark("section:%s" % name, "error", "%s: %s" % (type(exc).__name__, exc),
                              time.monotonic() - started[name])
                else:
                    self.mark("section:%s" % name, "timeout", "section still running after %gs" % deadline_s,
                              time.monotonic() - started[name])
                continue
            if value is not None:
                results[name] = value
        pool.shutdown(wait=False)
        return results


# ---- small readers shared by the sections ------------------------------------------------------------------


def read(path, default=None, limit=1 << 20):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit)
    except OSError:
        return default


def read_strip(path, default=None):
    text = read(path, None, 65536)
    return default if text is None else text.strip()


def listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def readlink_base(path):
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def to_int(text, default=None):
    try:
        return int(str(text).strip(), 0)
    except (TypeError, ValueError):
        try:
            return int(float(str(text).strip()))
        except (TypeError, ValueError):
            return default


def version_in(text, pattern=r"(\d+(?:\.\d+)+)"):
    """First dotted version number in text, or None."""
    m = re.search(pattern, text or "")
    return m.group(1) if m else None


def read_key_values(text, sep="="):
    """`KEY=value` / `Key = value` lines, comments and blanks skipped; later keys win."""
    out = {}
    for line in (text or "").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or sep not in line:
            continue
        key, value = line.split(sep, 1)
        key = key.strip()
        if key.startswith("export "):
            key = key[len("export "):].strip()
        out[key] = value.strip().strip('"').strip("'")
    return out
