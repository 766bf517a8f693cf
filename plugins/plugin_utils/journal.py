"""The run journal behind the ``clustermax.assess.assessment`` callback, as plain Python.

The callback only adapts ansible-core's ``v2_*`` events into calls on this module, so everything here works on
plain dicts and strings and is unit-tested without ansible-core. Nothing in this module raises into the caller
for an I/O problem: it reports through the ``warn`` function it was given and carries on (or stops writing).

Files, all inside the run directory that the preflight role announces through the ``assess_run`` fact:

- ``journal.jsonl``: one JSON object per line, appended and flushed line by line, so an interrupted run still
  leaves a readable journal. Lines recorded before the run directory is known are kept in memory and written
  first, in order, once it is.
- ``run.json``: the run summary (schema ``clustermax.assess/run/v1``), written atomically at the end of the run.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

JOURNAL_FILE = "journal.jsonl"
RUN_FILE = "run.json"
RUN_SCHEMA = "clustermax.assess/run/v1"
RUN_FACT = "assess_run"
PROBE_ACTION = "clustermax.assess.probe"
# The actions whose results carry a probe's artifact: the probe action, and preflight's prepare_node (node_info).
PROBE_ACTIONS = (PROBE_ACTION, "clustermax.assess.prepare_node")
# The exact text ansible-core itself puts in place of a no_log result.
CENSORED = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"
STATUSES = ("ok", "changed", "failed", "skipped", "unreachable")
STAT_KEYS = ("ok", "changed", "failures", "unreachable", "skipped", "rescued", "ignored")
# Result fields the probe action returns that are worth keeping next to the task line.
PROBE_FIELDS = ("probe", "variant", "artifact")
# Long failure messages (a whole stderr) are cut to their end, where the error usually is.
MSG_LIMIT = 4000
STDERR_TAIL = 500
# A playbook that never announces a run directory must not grow the controller's memory without bound.
MAX_BUFFERED_LINES = 50_000

Warn = Callable[[str], None]


def _ignore(_message: str) -> None:
    return None


# --------------------------------------------------------------------------------------------------- time


def rfc3339(when: float | datetime | None = None) -> str:
    """An RFC 3339 UTC timestamp with milliseconds and a ``Z`` suffix (``time.time()`` when ``when`` is None)."""
    if when is None:
        when = time.time()
    if isinstance(when, datetime):
        moment = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
        moment = moment.astimezone(timezone.utc)
    else:
        moment = datetime.fromtimestamp(float(when), tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_rfc3339(text: Any) -> datetime | None:
    """The aware datetime of an RFC 3339 / ISO 8601 text (naive means UTC), or None when it is not one."""
    if not isinstance(text, str) or not text.strip():
        return None
    value = text.strip()
    if value[-1] in "zZ":
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


# ------------------------------------------------------------------------------------------- task results


def is_no_log(result: Mapping[str, Any], task_no_log: Any = False) -> bool:
    """Whether a result must not be written: ``_ansible_no_log`` in the result, or ``no_log: true`` on the task."""
    # ansible-core 2.18 drops _ansible_no_log from a censored result and leaves only its "censored" text.
    return bool(result.get("_ansible_no_log")) or task_no_log is True or result.get("censored") == CENSORED


def skip_reason_of(result: Mapping[str, Any]) -> str | None:
    """Why a task was skipped, from ``skip_reason`` and ``false_condition`` (the ``when`` that was false)."""
    reason = result.get("skip_reason")
    condition = result.get("false_condition")
    reason = str(reason) if reason not in (None, "") else None
    condition = str(condition) if condition not in (None, "") else None
    if reason and condition:
        return f"{reason}: {condition}"
    if condition:
        return f"Conditional result was False: {condition}"
    return reason


def failure_message(result: Mapping[str, Any]) -> str | None:
    """The message of a failed or unreachable result, with the tail of stderr when there is one."""
    msg = result.get("msg")
    msg = str(msg).strip() if msg not in (None, "") else ""
    stderr = result.get("stderr")
    stderr = stderr.strip() if isinstance(stderr, str) else ""
    if stderr and stderr not in msg:
        tail = stderr[-STDERR_TAIL:]
        msg = f"{msg}: {tail}" if msg else tail
    if not msg:
        return None
    return msg if len(msg) <= MSG_LIMIT else "…" + msg[-MSG_LIMIT:]


def item_label(result: Mapping[str, Any]) -> Any:
    """The label of a loop item result: ``loop_control.label`` when set, else the item itself."""
    if "_ansible_item_label" in result:
        return result["_ansible_item_label"]
    return result.get("item")


def result_line(
    *,
    host: str,
    status: str,
    result: Mapping[str, Any],
    play: str | None = None,
    task: str | None = None,
    action: str | None = None,
    role: str | None = None,
    duration_s: float | None = None,
    task_no_log: Any = False,
    item: bool = False,
    ignored: bool | None = None,
    rescued: bool | None = None,
    task_args: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The journal line of one task result for one host (one loop item when ``item`` is true).

    For the probe action, the probe's name and variant come from the task's arguments when the result lacks them
    (unreachable, or the action failed before running): the report must know which probe was attempted.

    When the result is no_log, every text taken from the result is replaced by :data:`CENSORED` and nothing
    else of the result is copied.
    """
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    hidden = is_no_log(result, task_no_log)
    line: dict[str, Any] = {
        "play": play,
        "task": task,
        "action": action,
        "role": role,
        "host": host,
        "status": status,
        "duration_s": None if duration_s is None else round(max(0.0, float(duration_s)), 3),
        "skip_reason": None,
        "msg": None,
    }
    if ignored is not None:
        line["ignored"] = bool(ignored)
    if rescued is not None:
        line["rescued"] = bool(rescued)
    if status == "skipped":
        line["skip_reason"] = CENSORED if hidden else skip_reason_of(result)
    if status in ("failed", "unreachable"):
        line["msg"] = CENSORED if hidden else failure_message(result)
    if item:
        line["item"] = CENSORED if hidden else item_label(result)
    if action in PROBE_ACTIONS:
        for field in PROBE_FIELDS:
            if field in result:
                line[field] = CENSORED if hidden else result[field]
        args = task_args or {}
        if "probe" not in line and isinstance(args.get("name"), str):
            line["probe"] = args["name"]
        if "variant" not in line and isinstance(args.get("variant"), str):
            line["variant"] = args["variant"]
    return line


def run_info_from(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``assess_run`` fact a task result sets (a dict with a non-empty ``dir``), or None."""
    facts = result.get("ansible_facts")
    if not isinstance(facts, Mapping):
        return None
    run = facts.get(RUN_FACT)
    if not isinstance(run, Mapping) or not isinstance(run.get("dir"), str) or not run["dir"].strip():
        return None
    return dict(run)


# ------------------------------------------------------------------------------------------------- stats


def summarize_stats(per_host: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per-host counters (``ok changed failures unreachable skipped rescued ignored``) and the failed and
    unreachable host lists, from ``{host: AggregateStats.summarize(host)}``."""
    stats = {
        str(host): {key: int((counts or {}).get(key) or 0) for key in STAT_KEYS}
        for host, counts in sorted(per_host.items(), key=lambda kv: str(kv[0]))
    }
    return {
        "stats": stats,
        "unreachable_hosts": [host for host, counts in stats.items() if counts["unreachable"]],
        "failed_hosts": [host for host, counts in stats.items() if counts["failures"]],
    }


def collection_version(root: str) -> str | None:
    """The collection's version: ``galaxy.yml`` of a checkout, else ``MANIFEST.json`` of a built collection."""
    try:
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        text = None
    if text is not None:
        try:
            import yaml  # PyYAML ships with ansible-core; the regex below covers its absence.

            data = yaml.safe_load(text)
            version = data.get("version") if isinstance(data, dict) else None
        except Exception:  # noqa: BLE001 - an unreadable galaxy.yml only means "version unknown"
            match = re.search(r"^version:\s*['\"]?([^'\"\s#]+)", text, re.MULTILINE)
            version = match.group(1) if match else None
        return str(version) if version not in (None, "") else None
    try:
        with open(os.path.join(root, "MANIFEST.json"), encoding="utf-8") as handle:
            version = json.load(handle)["collection_info"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(version) if version else None


# ---------------------------------------------------------------------------------------------- journal


class Journal:
    """Buffers journal lines until the run directory is known, then streams them to ``journal.jsonl``.

    ``encoder`` is the ``json.JSONEncoder`` class used for every line (the callback passes ansible-core's
    ``AnsibleJSONEncoder``); a value it cannot encode is written as its ``str``. ``warn`` receives one message
    per I/O problem; after a failed write the journal stops writing (the run goes on). ``note`` receives
    debugging notes (the callback passes ``display.vvv``).
    """

    def __init__(
        self,
        *,
        encoder: type[json.JSONEncoder] | None = None,
        warn: Warn | None = None,
        note: Warn | None = None,
        max_buffered: int = MAX_BUFFERED_LINES,
    ) -> None:
        self._encoder = encoder or json.JSONEncoder
        self._warn = warn or _ignore
        self._note = note or _ignore
        self._max_buffered = max_buffered
        self._buffer: list[str] = []
        self._dropped = 0
        self._handle: Any = None
        self._broken = False
        self.run: dict[str, Any] | None = None
        self.run_dir: str | None = None
        self.hosts: set[str] = set()
        self.lines_written = 0

    # -------------------------------------------------------------------------------- state

    @property
    def path(self) -> str | None:
        """``<run_dir>/journal.jsonl`` once the run directory is known."""
        return os.path.join(self.run_dir, JOURNAL_FILE) if self.run_dir else None

    @property
    def buffered(self) -> int:
        """How many lines wait in memory for the run directory."""
        return len(self._buffer)

    @property
    def broken(self) -> bool:
        """Whether a write failed (the journal then stops writing; the warning has been given)."""
        return self._broken

    def note_host(self, host: Any) -> None:
        """Remember a host seen in an event that writes no line (it still belongs in run.json ``hosts``)."""
        if host not in (None, ""):
            self.hosts.add(str(host))

    # ---------------------------------------------------------------------------- discovery

    def discover(self, result: Mapping[str, Any]) -> bool:
        """Learn the run directory from a task result that sets ``assess_run``; True when this one taught it."""
        run = run_info_from(result)
        return self.set_run(run) if run is not None else False

    def set_run(self, run: Mapping[str, Any]) -> bool:
        """Start writing into ``run["dir"]``: create ``journal.jsonl`` there, write the buffered lines in order.

        Only the first run directory counts; a later, different one is noted and ignored.
        """
        run_dir = os.path.abspath(os.path.expanduser(str(run["dir"])))
        if self.run_dir is not None:
            if run_dir != self.run_dir:
                self._note(f"journal already writes to {self.run_dir}; ignoring a later assess_run.dir {run_dir}")
            return False
        self.run = dict(run)
        self.run_dir = run_dir
        try:
            os.makedirs(run_dir, exist_ok=True)
            # Append: a run directory reused for a resumed run keeps what was already recorded.
            self._handle = open(self.path, "a", encoding="utf-8", errors="backslashreplace")
        except OSError as ex:
            self._fail(f"cannot open the journal {self.path}: {ex}")
        buffered, self._buffer = self._buffer, []
        if self._dropped:
            buffered.append(self._dumps({"ts": rfc3339(), "event": "journal_gap", "dropped_lines": self._dropped}))
        for text in buffered:
            self._write(text)
        # Who writes this run: playbooks/recover.yml refuses to recover a run whose controller is still alive (the
        # start time tells a live controller from a later process that reuses its pid).
        self.record({"event": "controller", "machine": socket.gethostname(), "pid": os.getpid(),
                     "start_ticks": start_ticks(os.getpid())})
        return True

    # ------------------------------------------------------------------------------- lines

    def record(self, line: Mapping[str, Any]) -> None:
        """Add one line (``ts`` is put first unless given); buffered or written at once, flushed."""
        entry = {"ts": line.get("ts") or rfc3339()}
        entry.update((key, value) for key, value in line.items() if key != "ts")
        self.note_host(entry.get("host"))
        text = self._dumps(entry)
        if text is None:
            return
        if self.run_dir is None:
            if len(self._buffer) < self._max_buffered:
                self._buffer.append(text)
            else:
                self._dropped += 1
            return
        self._write(text)

    def close(self) -> None:
        """Close the journal file (lines are already flushed; this only releases the handle)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except OSError as ex:
                self._fail(f"cannot close the journal {self.path}: {ex}")

    # -------------------------------------------------------------------------- run summary

    def run_summary(
        self,
        *,
        stats: Mapping[str, Mapping[str, Any]],
        playbook: str | None,
        ansible_version: str | None,
        collection_version: str | None,
        started_at: str | None = None,
        finished_at: str | None = None,
        extra_hosts: Iterable[str] = (),
        interrupted: bool = False,
    ) -> dict[str, Any]:
        """The ``run.json`` document. ``started_at`` is the fallback when ``assess_run`` has none."""
        run = self.run or {}
        summary = summarize_stats(stats)
        finished_at = finished_at or rfc3339()
        started_at = str(run.get("started_at") or started_at or "") or None
        begin, end = parse_rfc3339(started_at), parse_rfc3339(finished_at)
        duration = round((end - begin).total_seconds(), 3) if begin and end else None
        hosts = set(self.hosts) | set(summary["stats"]) | {str(host) for host in extra_hosts}
        return {
            "schema": RUN_SCHEMA,
            "run_id": run.get("id"),
            "provider": run.get("provider"),
            "profile": run.get("profile"),
            "playbook": os.path.basename(playbook) if playbook else None,
            "started_at": started_at,
            "finished_at": finished_at,
            "duration_s": duration,
            "ansible_version": ansible_version,
            "collection_version": collection_version,
            "hosts": sorted(hosts),
            "stats": summary["stats"],
            "unreachable_hosts": summary["unreachable_hosts"],
            "failed_hosts": summary["failed_hosts"],
            "interrupted": bool(interrupted),
            **({"slice": run["slice"]} if run.get("slice") else {}),
        }

    def write_run_summary(self, **summary_args: Any) -> str | None:
        """Write ``run.json`` atomically (temporary file, then rename) and return its path.

        Takes the arguments of :meth:`run_summary`. Returns None, writing nothing, when the run directory was
        never learned, and None after a warning when the file cannot be written.
        """
        if self.run_dir is None:
            self._note("no assess_run fact was seen: no run directory, so no run.json")
            return None
        text = self._dumps(self.run_summary(**summary_args), indent=2)
        if text is None:
            return None
        target = os.path.join(self.run_dir, RUN_FILE)
        # A temporary name of our own (not mkstemp) so the file gets the usual umask permissions, not 0600.
        temp = os.path.join(self.run_dir, f".{RUN_FILE}.{os.getpid()}.tmp")
        try:
            with open(temp, "w", encoding="utf-8", errors="backslashreplace") as handle:
                handle.write(text + "\n")
            os.replace(temp, target)
        except OSError as ex:
            self._warn(f"cannot write {target}: {ex}")
            try:
                os.unlink(temp)
            except OSError:
                pass
            return None
        return target

    # ------------------------------------------------------------------------------ helpers

    def _dumps(self, value: Mapping[str, Any], indent: int | None = None) -> str | None:
        try:
            return json.dumps(value, cls=self._encoder, ensure_ascii=False, indent=indent)
        except Exception:  # noqa: BLE001 - fall back to plain JSON with str() for anything exotic
            pass
        try:
            return json.dumps(value, default=str, ensure_ascii=False, indent=indent)
        except (TypeError, ValueError) as ex:
            self._warn(f"cannot encode a journal line as JSON ({ex}); line dropped")
            return None

    def _write(self, text: str) -> None:
        if self._broken or self._handle is None:
            return
        try:
            self._handle.write(text + "\n")
            self._handle.flush()
        except (OSError, ValueError) as ex:
            self._fail(f"cannot write the journal {self.path}: {ex}")
            return
        self.lines_written += 1

    def _fail(self, message: str) -> None:
        if not self._broken:
            self._broken = True
            self._warn(message + "; no further journal lines are written for this run")
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except (OSError, ValueError):
                pass


# ---------------------------------------------------------------------------------------------- report


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


# Set in the environment of the cleanup started for an interrupted run: that playbook is not cleaned up in turn.
CLEANUP_OF_ENV = "CLUSTERMAX_ASSESS_CLEANUP_OF"


def cleanup_argv(run_id: str, cli_args: Mapping[str, Any], root: str, playbook_cmd: Iterable[str],
                 hosts: Iterable[str] | None = None) -> list[str]:
    """The command that removes what a run left on its nodes when its own cleanup play did not reach them (an
    interrupted run, or hosts that dropped out after a failed task): playbooks/cleanup.yml with
    assess_cleanup_run=<run id> (its processes, working directory and run lock), on the same inventory, limit (or
    only ``hosts``), extra vars (assess_remote_tmp, connection variables) and connection options as the playbook.
    cli_args is ansible's context.CLIARGS; playbook_cmd how to start ansible-playbook."""
    argv = list(playbook_cmd) + [os.path.join(root, "playbooks", "cleanup.yml")]
    for source in cli_args.get("inventory") or ():
        argv += ["-i", str(source)]
    limit = ",".join(hosts) if hosts is not None else cli_args.get("subset")
    if limit:
        argv += ["--limit", str(limit)]
    for extra in cli_args.get("extra_vars") or ():
        argv += ["-e", str(extra)]
    # how the playbook reached and acted on the nodes (nothing that prompts: the cleanup runs without a terminal)
    for key, flag in (("remote_user", "--user"), ("private_key_file", "--private-key"),
                      ("connection", "--connection"), ("timeout", "--timeout"),
                      ("ssh_common_args", "--ssh-common-args"), ("ssh_extra_args", "--ssh-extra-args"),
                      ("become_method", "--become-method"), ("become_user", "--become-user")):
        if cli_args.get(key):
            argv += [flag, str(cli_args[key])]
    if cli_args.get("become"):
        argv.append("--become")
    for vault_id in cli_args.get("vault_ids") or ():
        argv += ["--vault-id", str(vault_id)]
    for path in cli_args.get("vault_password_files") or ():
        argv += ["--vault-password-file", str(path)]
    return argv + ["-e", "assess_cleanup_run=%s" % run_id]


def report_argv(run_dir: str, python: str | None = None, command: str = "build") -> list[str]:
    """The command that builds the report of a run directory (merge: joins a sliced run's slices first)."""
    return [python or sys.executable, "-m", "reports", command, run_dir]


def _text(data: Any) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return str(data)


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _crashed(stderr: str) -> bool:
    # Python itself exits with 1 for an uncaught exception and for "No module named": those are not "failures found".
    return "Traceback (most recent call last)" in stderr or "No module named" in stderr


def build_report(run_dir: str, *, root: str, timeout: float, python: str | None = None,
                 command: str = "build") -> tuple[str, str | None]:
    """Run ``python -m reports build <run_dir>`` (or ``merge``) in ``root`` (prefixed to PYTHONPATH) and classify the
    outcome.

    Returns ``(stdout, problem)``: ``problem`` is None when the build ran (exit 0, 1 = "ran, failures found", or 2
    with "cannot be judged": the report was written and its summary says why, e.g. a run of preflight alone),
    otherwise a one-paragraph description with the tail of stderr (exit >= 2, a crash, a timeout, no Python).
    """
    argv = report_argv(run_dir, python, command)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, env.get("PYTHONPATH"))))
    try:
        proc = subprocess.run(
            argv,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as ex:
        stderr = _tail(_text(ex.stderr))
        return _text(ex.stdout), f"report {command} timed out after {timeout:g}s" + (f": {stderr}" if stderr else "")
    except OSError as ex:
        return "", f"report {command} could not start ({' '.join(argv)}): {ex}"
    stdout, stderr = _text(proc.stdout), _text(proc.stderr)
    if proc.returncode == 0 or (proc.returncode == 1 and not _crashed(stderr)):
        return stdout, None
    if proc.returncode == 2 and "cannot be judged:" in stdout and not _crashed(stderr):
        return stdout, None
    return stdout, f"report {command} failed (exit {proc.returncode}): {_tail(stderr) or 'no error output'}"
