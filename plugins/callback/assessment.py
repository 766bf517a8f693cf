"""Aggregate callback clustermax.assess.assessment: journal every task result, summarize the run, build the report."""

from __future__ import annotations

DOCUMENTATION = r"""
name: assessment
type: aggregate
short_description: Journal every task of an assessment run and build its report
description:
  - Writes C(journal.jsonl) in the run directory of a clustermax.assess run, one JSON line per task result per
    host (play, task, resolved action, role, host, status, duration, skip reason, failure message, loop item,
    probe name and artifact path), plus one line per play start and a final line with the play recap.
  - The run directory is the C(dir) of the C(assess_run) fact that the preflight role sets with
    C(ansible.builtin.set_fact). Lines recorded before that are kept in memory and written first once it is
    known; after that every line is flushed as it is written, so an interrupted run leaves a readable journal.
  - At the end of the playbook writes C(run.json) (schema C(clustermax.assess/run/v1)) with the run's identity,
    timing, versions and per-host recap, then builds the report with C(python -m reports build <run dir>) and
    shows its summary. Exit code 1 of the report build means "the run has failed checks" and is shown as is;
    any other failure of the build is a warning.
  - When no C(assess_run) fact is ever seen (for example validation failed in the first play) nothing is
    written anywhere.
  - Problems writing files or building the report are warnings; this callback never fails a run.
  - Works next to any stdout callback, including the C(awx_display) one ansible-runner forces.
author: clustermax.assess contributors
requirements:
  - Enable it in C(callbacks_enabled) of the C([defaults]) section of ansible.cfg, or in the
    E(ANSIBLE_CALLBACKS_ENABLED) environment variable (which replaces the ansible.cfg list, so it must name
    C(clustermax.assess.assessment) too), as C(clustermax.assess.assessment).
options:
  report:
    description:
      - Build the report (C(python -m reports build <run dir>)) after C(run.json) is written.
    type: bool
    default: true
    env:
      - name: CLUSTERMAX_ASSESS_REPORT
    ini:
      - section: callback_assessment
        key: report
  report_timeout:
    description:
      - Seconds the report build may take before it is stopped with a warning.
    type: int
    default: 600
    env:
      - name: CLUSTERMAX_ASSESS_REPORT_TIMEOUT
    ini:
      - section: callback_assessment
        key: report_timeout
  progress_interval:
    description:
      - For a task that runs long (a probe measuring for minutes), show every this many seconds how many hosts are
        done and, for the slowest still running, how long they have run and at most how long they have left
        (plugin_utils/progress.py). 0 shows nothing.
    type: int
    default: 30
    env:
      - name: CLUSTERMAX_ASSESS_PROGRESS_INTERVAL
    ini:
      - section: callback_assessment
        key: progress_interval
"""

import atexit
import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ansible_version
from ansible_collections.clustermax.assess.plugins.plugin_utils.journal import (
    CLEANUP_OF_ENV,
    Journal,
    build_report,
    cleanup_argv,
    collection_version,
    result_line,
    rfc3339,
    summarize_stats,
)
from ansible_collections.clustermax.assess.plugins.plugin_utils.progress import TaskProgress
from ansible_collections.clustermax.assess.plugins.plugin_utils.worker_lifetime import end_workers_with_controller
from ansible_collections.clustermax.assess.plugins.plugin_utils.worker_preload import load_jinja_plugins

try:
    from ansible.module_utils.common.json import AnsibleJSONEncoder
except ImportError:  # pragma: no cover - every supported ansible-core has it; plain JSON is the fallback
    AnsibleJSONEncoder = None

# Plays of playbooks/cleanup.yml are named so (the run's own cleanup, which every run playbook ends with).
CLEANUP_PLAY = "Cleanup |"
# Preflight's one task per node, which takes the run lock (its fact preflight_lock_taken says whether it did).
LOCK_ACTIONS = ("clustermax.assess.prepare_node", "prepare_node")
CALLBACK_FQCN = "clustermax.assess.assessment"
# plugins/callback/assessment.py -> the collection root, where galaxy.yml and the reports package live.
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


# -------------------------------------------------------------------------------------------- accessors
# ansible-core 2.19 gives task results public .result/.host/.task; 2.18 only _result/_host/_task.


def _result_of(res: Any) -> Mapping[str, Any]:
    """The result dict of a callback task result (``.result`` on 2.19+, ``._result`` on 2.18)."""
    for attr in ("result", "_result"):
        value = getattr(res, attr, None)
        if isinstance(value, Mapping):
            return value
    return {}


def _host_of(res: Any) -> Any:
    """The Host of a callback task result (``.host`` on 2.19+, ``._host`` on 2.18)."""
    host = getattr(res, "host", None)
    return host if host is not None else getattr(res, "_host", None)


def _ignores_unreachable(task: Any) -> bool:
    """Whether the task carries ignore_unreachable (its unreachable results leave the host in the play)."""
    return bool(getattr(task, "ignore_unreachable", False))


def _task_of(res: Any) -> Any:
    """The Task of a callback task result (``.task`` on 2.19+, ``._task`` on 2.18)."""
    task = getattr(res, "task", None)
    return task if task is not None else getattr(res, "_task", None)


def _name_of(obj: Any) -> str | None:
    """``obj.get_name()`` (Host, Task, Play, Role), else ``obj.name``, else None."""
    if obj is None:
        return None
    get_name = getattr(obj, "get_name", None)
    name = get_name() if callable(get_name) else getattr(obj, "name", None)
    return str(name) if name not in (None, "") else None


def _uuid_of(obj: Any) -> str:
    return str(getattr(obj, "_uuid", None) or id(obj))


def _action_of(task: Any) -> str | None:
    """The resolved action FQCN (``ansible.builtin.command``), else the action as written."""
    resolved = getattr(task, "_resolved_action", None)
    action = getattr(task, "action", None)
    if not resolved and action and "{{" not in str(action):
        # resolved_action warns when the action is still a template; only ask when it is not one.
        try:
            resolved = getattr(task, "resolved_action", None)
        except Exception:  # noqa: BLE001 - an unresolvable action still has its written name
            resolved = None
    value = resolved or action
    return str(value) if value else None


def _role_of(task: Any) -> str | None:
    return _name_of(getattr(task, "_role", None))


def _in_section(section: Any, child: Any) -> bool:
    if not isinstance(section, list):
        return False
    uuid = getattr(child, "_uuid", None)
    return any(entry is child or (uuid is not None and getattr(entry, "_uuid", None) == uuid) for entry in section)


def _rescued(task: Any) -> bool:
    """Whether a failed task sits in the ``block:`` part of a block that has a ``rescue:`` (at any depth)."""
    child, parent = task, getattr(task, "_parent", None)
    for _depth in range(64):
        if parent is None:
            return False
        if getattr(parent, "rescue", None) and _in_section(getattr(parent, "block", None), child):
            return True
        child, parent = parent, getattr(parent, "_parent", None)
    return False


def _guarded(method):
    """Turn an exception in a v2_* handler into a warning: a raising callback hides the run's results."""

    @functools.wraps(method)
    def handler(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as ex:  # noqa: BLE001 - never propagate into ansible-core's dispatcher
            try:
                self._display.warning(f"{CALLBACK_FQCN} callback: {method.__name__} failed: {type(ex).__name__}: {ex}")
            except Exception:  # noqa: BLE001 - not even a broken display may escape
                pass
        return None

    return handler


# ----------------------------------------------------------------------------------------------- plugin


class CallbackModule(CallbackBase):
    """Adapts ansible-core events into :class:`Journal` calls (plain Python, see plugin_utils/journal.py)."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = CALLBACK_FQCN
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None, options=None):
        self._report = True
        self._report_timeout = 600
        self._progress = TaskProgress()
        self._ticker: threading.Thread | None = None
        self._ticker_stop = threading.Event()
        super().__init__(display=display, options=options)
        self.journal = Journal(encoder=self._encoder(), warn=self._warn, note=self._note)
        self._playbook: str | None = None
        self._started_at = rfc3339()
        self._play: str | None = None
        self._task_started: dict[str, float] = {}
        self._host_started: dict[tuple[str, str], float] = {}
        self._item_done: dict[tuple[str, str], float] = {}
        self._ended = False
        self._cleaned = False
        self._watching = False  # a playbook run from the command line: its leftovers are cleaned up
        self._has_cleanup_play = False  # the playbook ends with playbooks/cleanup.yml (assess.yml, recover.yml)
        self._cleanup_play_started = False
        # Hosts whose preflight did not take the run lock (refused by another run, or no usable Python): the run
        # made nothing there (the working directory comes after the lock), so there is nothing to clean up.
        self._lock_not_taken = set()
        self._watch_interruptions()

    # ------------------------------------------------------------------------------ options

    def set_options(self, task_keys=None, var_options=None, direct=None):
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        self.configure(report=self.get_option("report"), report_timeout=self.get_option("report_timeout"),
                       progress_interval=self.get_option("progress_interval"))

    def configure(self, *, report: bool = True, report_timeout: float = 600, progress_interval: float = 30) -> None:
        """Apply the plugin options (set_options reads them from env/ini; tests call this directly)."""
        self._report = bool(report)
        self._report_timeout = float(report_timeout) if report_timeout else 600.0
        self._progress.every = max(0.0, float(progress_interval or 0))

    def _start_ticker(self) -> None:
        """Once, in a playbook run from the command line: the thread that shows long tasks' progress."""
        if self._ticker is not None or not self._watching or not self._progress.every:
            return

        def tick():
            while not self._ticker_stop.wait(min(5.0, self._progress.every)):
                for line in self._progress.lines(time.monotonic()):
                    self._display.display(line)

        self._ticker = threading.Thread(target=tick, name="clustermax-progress", daemon=True)
        self._ticker.start()

    # ------------------------------------------------------------------------------ plumbing

    @staticmethod
    def _encoder():
        if AnsibleJSONEncoder is None:
            return None

        class _Encoder(AnsibleJSONEncoder):
            """AnsibleJSONEncoder (2.19 tagged strings, vault values), with str() for anything else."""

            def default(self, o):
                try:
                    return super().default(o)
                except TypeError:
                    return str(o)

        return _Encoder

    def _warn(self, message: str) -> None:
        self._display.warning(f"{CALLBACK_FQCN} callback: {message}")

    def _note(self, message: str) -> None:
        self._display.vvv(f"{CALLBACK_FQCN} callback: {message}")

    def _duration(self, host: str, task: Any, *, item: bool) -> float | None:
        """Seconds since this host started the task (falling back to the task's start); a loop item's own time."""
        key = (host, _uuid_of(task))
        now = time.monotonic()
        start = self._host_started.get(key)
        if start is None:
            start = self._task_started.get(key[1])
        if item:
            since = self._item_done.get(key, start)
            self._item_done[key] = now
            return None if since is None else now - since
        self._host_started.pop(key, None)
        self._item_done.pop(key, None)
        return None if start is None else now - start

    def _record_result(self, res: Any, status: str, *, item: bool = False, ignored: bool | None = None) -> None:
        result = _result_of(res)
        task = _task_of(res)
        host = _name_of(_host_of(res)) or "?"
        if not item:
            self.journal.discover(result)
            taken = (result.get("ansible_facts") or {}).get("preflight_lock_taken") \
                if _action_of(task) in LOCK_ACTIONS else None
            if taken is False:
                self._lock_not_taken.add(host)
            elif taken:
                self._lock_not_taken.discard(host)
        self._progress.host_event(_uuid_of(task), host, time.monotonic(), done=not item)
        if status == "ok" and result.get("changed"):
            status = "changed"
        rescued = None
        if status == "failed" and not item:
            rescued = bool(not ignored and _rescued(task))
        self.journal.record(
            result_line(
                host=host,
                status=status,
                result=result,
                play=self._play,
                task=_name_of(task),
                action=_action_of(task),
                role=_role_of(task),
                duration_s=self._duration(host, task, item=item),
                task_no_log=getattr(task, "no_log", False),
                item=item,
                ignored=ignored,
                rescued=rescued,
                task_args=getattr(task, "args", None) if isinstance(getattr(task, "args", None), dict) else None,
            )
        )

    # ------------------------------------------------------------------------------ playbook events

    @_guarded
    def v2_playbook_on_start(self, playbook):
        if self._playbook is None:
            self._playbook = str(getattr(playbook, "_file_name", None) or "") or None
            self._started_at = rfc3339()
        try:
            plays = playbook.get_plays()
        except Exception:  # noqa: BLE001 - a playbook object without plays (tests) has no cleanup play
            plays = []
        self._has_cleanup_play = self._has_cleanup_play or any(
            str(_name_of(p) or "").startswith(CLEANUP_PLAY) for p in plays)

    @_guarded
    def v2_playbook_on_play_start(self, play):
        self._play = _name_of(play)
        self._cleanup_play_started = self._cleanup_play_started or str(self._play or "").startswith(CLEANUP_PLAY)
        hosts = getattr(play, "hosts", None)
        if hosts is None:
            patterns = []
        elif isinstance(hosts, (list, tuple)):
            patterns = [str(pattern) for pattern in hosts]
        else:
            patterns = [str(hosts)]
        self.journal.record({"event": "play_start", "play": self._play, "hosts": patterns})
        # before this play forks a worker: otherwise each worker whose task templates a filter or a test loads them
        # all again (plugin_utils/worker_preload.py)
        load_jinja_plugins()

    @_guarded
    def v2_playbook_on_task_start(self, task, is_conditional):
        now = self._task_started[_uuid_of(task)] = time.monotonic()
        self._progress_of(task, now)

    @_guarded
    def v2_playbook_on_handler_task_start(self, task):
        self._task_started[_uuid_of(task)] = time.monotonic()

    @_guarded
    def v2_runner_on_start(self, host, task):
        name = _name_of(host)
        self.journal.note_host(name)
        now = self._host_started[(name or "?", _uuid_of(task))] = time.monotonic()
        self._progress.host_started(_uuid_of(task), name or "?", now)

    def _progress_of(self, task: Any, now: float) -> None:
        """A task starts (its timeout is the task keyword's or the probe's own `timeout` argument, when not a
        template)."""
        timeout = None
        args = getattr(task, "args", None)
        for value in (getattr(task, "timeout", None), args.get("timeout") if isinstance(args, dict) else None):
            try:
                timeout = timeout or (float(value) if value else None)
            except (TypeError, ValueError):
                pass
        self._progress.task_started(_uuid_of(task), _name_of(task), timeout, now)
        self._start_ticker()

    # ------------------------------------------------------------------------------ results

    @_guarded
    def v2_runner_on_ok(self, result):
        self._record_result(result, "ok")

    @_guarded
    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record_result(result, "failed", ignored=bool(ignore_errors))

    @_guarded
    def v2_runner_on_skipped(self, result):
        self._record_result(result, "skipped")

    @_guarded
    def v2_runner_on_unreachable(self, result):
        # ansible reports an unreachable host to callbacks even under ignore_unreachable (a poll that misses a slot,
        # a reading delegated to another host): marked ignored, it does not make the host unreachable for the run
        self._record_result(result, "unreachable", ignored=_ignores_unreachable(_task_of(result)))

    @_guarded
    def v2_runner_on_async_failed(self, result):
        self._record_result(result, "failed")

    @_guarded
    def v2_runner_item_on_ok(self, result):
        self._record_result(result, "ok", item=True)

    @_guarded
    def v2_runner_item_on_failed(self, result):
        unreachable = bool(_result_of(result).get("unreachable"))
        self._record_result(result, "failed", item=True,
                            ignored=True if unreachable and _ignores_unreachable(_task_of(result)) else None)

    @_guarded
    def v2_runner_item_on_skipped(self, result):
        self._record_result(result, "skipped", item=True)

    # ------------------------------------------------------------------------------ interruptions

    def _watch_interruptions(self):
        """Ctrl-C (SIGINT) and SIGTERM end a playbook before its cleanup play, and the detached node runs (burn-in
        runners, watchers) would go on until their own heartbeat timeout. ansible-core turns SIGINT into
        KeyboardInterrupt and exits 99: the cleanup runs at exit (atexit). On SIGTERM it kills itself (no atexit):
        the cleanup runs in the handler first, then ansible-core's own handler. SIGKILL leaves the nodes to the
        heartbeat timeouts and `playbooks/cleanup.yml -e assess_cleanup_run=<run id>` (README); its forked workers
        die with it (plugin_utils/worker_lifetime.py)."""
        from ansible import context

        if not context.CLIARGS.get("inventory"):
            return  # made by hand (tests): not a playbook run
        # A playbook run (the cleanup this starts included): a `kill -9` of it takes its forked workers with it
        # (plugin_utils/worker_lifetime.py), or they hang on its results pipe.
        if threading.current_thread() is threading.main_thread():
            end_workers_with_controller()
        # only in a playbook run from the command line (ansible-playbook, ansible-runner): not in the cleanup that
        # this starts, not in a thread
        if (os.environ.get(CLEANUP_OF_ENV)
                or threading.current_thread() is not threading.main_thread()):
            return
        self._watching = True
        atexit.register(self._cleanup_interrupted, "interrupted")
        previous = signal.getsignal(signal.SIGTERM)
        main_pid = os.getpid()

        def on_sigterm(signum, frame):
            # a forked worker inherits this handler (ansible-core 2.16 workers install none): only the controller
            # itself cleans up, once
            if os.getpid() == main_pid:
                self._cleanup_interrupted("SIGTERM")
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_IGN:
                return
            else:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, on_sigterm)
        self._interrupt_without_forwarding(main_pid)

    @staticmethod
    def _interrupt_without_forwarding(main_pid):
        """Ctrl-C ends the controller without signalling its workers first.

        ansible-core's SIGINT handler (TaskQueueManager._signal_handler) sends SIGINT to every worker, then raises
        KeyboardInterrupt. A worker's own handler (WorkerProcess._term) kills it at once, also when it is in the
        middle of putting a result into the results queue: it dies holding that queue's write lock (a
        multiprocessing lock, never released by a dead holder), and the controller then blocks for ever putting its
        own end marker into the same queue (StrategyBase.cleanup): no cleanup, no exit. A burn-in poll's result is
        large, so a worker spends much of its time in that write; a clean-clone run hung so (2026-12-05). Here
        SIGINT only raises KeyboardInterrupt in the controller: ansible-core's own cleanup reads the queue to its end
        marker, then ends the workers with SIGTERM (TaskQueueManager._cleanup_processes), once nothing reads the
        queue any more. A second Ctrl-C ends the controller at once, as ansible-core's does."""
        previous = signal.getsignal(signal.SIGINT)

        def on_sigint(signum, frame):
            if os.getpid() != main_pid:  # a forked worker before it installs its own handler
                if callable(previous):
                    previous(signum, frame)
                return
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            raise KeyboardInterrupt()

        signal.signal(signal.SIGINT, on_sigint)

    def _cleanup_interrupted(self, why, hosts=None):
        """Once, for a run that made its directory on the controller and whose playbook has a cleanup play that did
        not reach every host (interrupted; or `hosts`: the hosts that dropped out after a failed task, which later
        plays skip): stop its processes there and remove its working directory and run lock (playbooks/cleanup.yml,
        300 s at most)."""
        if (self._ended and hosts is None) or self._cleaned or self.journal.run_dir is None:
            return
        if not self._has_cleanup_play:
            return
        self._cleaned = True
        from ansible import context

        # the run's id (a slice's directory is <run>/slices/<slice>: the nodes' lock and directory are the run's)
        run_id = str((self.journal.run or {}).get("id") or os.path.basename(self.journal.run_dir.rstrip(os.sep)))
        script = sys.argv[0] if os.path.basename(sys.argv[0]) == "ansible-playbook" else \
            shutil.which("ansible-playbook") or "ansible-playbook"
        argv = cleanup_argv(run_id, context.CLIARGS, COLLECTION_ROOT, [sys.executable, script], hosts=hosts)
        self._display.display("%s: removing what run %s left on %s (%s)" % (
            why, run_id, ", ".join(hosts) if hosts else "the nodes", " ".join(argv)), stderr=True)
        env = dict(os.environ, **{CLEANUP_OF_ENV: run_id})
        try:
            proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=300, start_new_session=True)
            rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-2000:]
        except (OSError, subprocess.TimeoutExpired) as ex:
            rc, tail = None, str(ex)
        self.journal.record({"event": "interrupted_cleanup", "why": why, "rc": rc, "argv": argv})
        if hosts is None:
            self.journal.close()
        if rc != 0:
            self._warn("the cleanup of run %s failed (rc %s): %s; run it again: %s" % (run_id, rc, tail,
                                                                                      " ".join(argv)))

    # ------------------------------------------------------------------------------ end of run

    @_guarded
    def v2_playbook_on_stats(self, stats):
        self._ended = True
        self._ticker_stop.set()
        journal = self.journal
        if journal.run_dir is None:
            self._note("no assess_run fact was seen, so no run directory: nothing written")
            return
        per_host = {str(host): stats.summarize(host) for host in getattr(stats, "processed", {}) or {}}
        summary = summarize_stats(per_host)
        # Hosts the cleanup play did not reach: those that dropped out after a failed task, or every reachable
        # host when the playbook stopped before its cleanup play (a fatal error).
        run_hosts = set((journal.run or {}).get("hosts") or ())  # the run's nodes (not the implicit localhost)
        missed = [h for h in (summary["failed_hosts"] if self._cleanup_play_started else sorted(per_host))
                  if h in run_hosts and h not in summary["unreachable_hosts"] and h not in self._lock_not_taken]
        if missed and self._watching:
            self._cleanup_interrupted("not reached by the cleanup play", hosts=missed)
        journal.record({"event": "stats", **summary})
        journal.close()
        path = journal.write_run_summary(
            stats=per_host,
            playbook=self._playbook,
            ansible_version=ansible_version,
            collection_version=collection_version(COLLECTION_ROOT),
            started_at=self._started_at,
        )
        if path is None or not self._report:
            return
        stdout, problem = build_report(journal.run_dir, root=COLLECTION_ROOT, timeout=self._report_timeout)
        if stdout.strip():
            self._display.display(stdout.rstrip())
        if problem:
            self._warn(problem)
        if (journal.run or {}).get("slice"):
            # One slice of a sliced run (AWX job slicing): the run is its slices joined, merged again by each slice
            # that ends, so the last one to end leaves the report of every host (reports/merge.py).
            whole = os.path.dirname(os.path.dirname(journal.run_dir))
            stdout, problem = build_report(whole, root=COLLECTION_ROOT, timeout=self._report_timeout,
                                           command="merge")
            if stdout.strip():
                self._display.display(stdout.rstrip())
            if problem:
                self._warn(problem)
