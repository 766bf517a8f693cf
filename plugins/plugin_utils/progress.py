"""Progress of long tasks on the controller: which hosts are done, and for how long the others have run.

A probe that measures for minutes (collectives over world sizes, the fio sweep, training, the inference sweep) is
one task that prints nothing until every host has finished it; on a fleet, an operator cannot tell a slow host from
a hung run. The burn-in shows its own progress (its poll loop); for every other task the callback
(plugins/callback/assessment.py) asks :meth:`TaskProgress.lines` every few seconds and shows, for a task that has
run ``every`` seconds or more since its last line or result, how many hosts are done and, for the slowest hosts
still running, how long they have run and at most how long they have left (the task's own ``timeout``, or the
probe's ``timeout`` argument). Plain Python, no ansible: the unit tests give the clock.
"""

from __future__ import annotations

import threading

# Hosts still running that a line names, slowest first; the rest are counted.
NAMED = 5


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return "%ds" % seconds
    if seconds < 3600:
        return "%dm%02ds" % divmod(seconds, 60)
    hours, rest = divmod(seconds, 3600)
    return "%dh%02dm" % (hours, rest // 60)


class TaskProgress:
    """The running task (the linear strategy of ansible.cfg runs one at a time): its name and timeout, per host when
    it started and whether it is done. Events of another task (a late result) are ignored."""

    def __init__(self, every: float = 30.0):
        self.every = float(every)
        self._lock = threading.Lock()
        self._task: dict | None = None

    def task_started(self, uuid: str, name: str | None, timeout: float | None, now: float) -> None:
        """A task starts, and the one before it has ended."""
        with self._lock:
            self._task = {"uuid": uuid, "name": name or "?", "timeout": timeout, "hosts": {}, "done": set(),
                          "shown": now}

    def _current(self, uuid: str) -> dict | None:
        task = self._task
        return task if task is not None and task["uuid"] == uuid else None

    def host_started(self, uuid: str, host: str, now: float) -> None:
        with self._lock:
            task = self._current(uuid)
            if task is not None:
                task["hosts"].setdefault(host, now)

    def host_event(self, uuid: str, host: str, now: float, done: bool) -> None:
        """A result of the host (done) or one of its loop items (not done, but alive: no line for a while)."""
        with self._lock:
            task = self._current(uuid)
            if task is None:
                return
            task["hosts"].setdefault(host, now)
            task["shown"] = now
            if done:
                task["done"].add(host)

    def lines(self, now: float) -> list[str]:
        """A line for the task when it has hosts still running and has shown nothing for `every` seconds."""
        with self._lock:
            task = self._task
            if task is None:
                return []
            running = {h: t for h, t in task["hosts"].items() if h not in task["done"]}
            if not running or now - task["shown"] < self.every:
                return []
            task["shown"] = now
            slowest = sorted(running.items(), key=lambda kv: (kv[1], kv[0]))
            named = []
            for host, started in slowest[:NAMED]:
                left = ""
                if task["timeout"]:
                    left = ", at most %s left" % duration(max(0.0, task["timeout"] - (now - started)))
                named.append("%s %s%s" % (host, duration(now - started), left))
            more = " and %d more" % (len(running) - NAMED) if len(running) > NAMED else ""
            return ["progress | %s: %d of %d hosts done; running: %s%s" % (
                task["name"], len(task["done"]), len(task["hosts"]), "; ".join(named), more)]
