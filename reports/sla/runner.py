"""Run the collection's playbooks through ansible-runner (what AWX uses) with a live progress display.

    clustermax-run playbooks/healthprobe.yml -i inventory.ini
    clustermax-run playbooks/healthprobe.yml -i inventory.ini --repeat 8 --every 2     # a bounded sampling loop
    clustermax-run playbooks/sla_review.yml -i inventory.ini -e sla_month=2026-11
    clustermax-run assess.yml -i provider.ini -e assess_profile=quick --tags audit

The playbook runs with the checkout (or installed collection root) as its project directory and its ansible.cfg,
so FQCNs, the assessment callback and the relative paths resolve as with `ansible-playbook` from the checkout.
Progress goes to stderr: one line per finished task (host counts by status, elapsed time); on a terminal the
current task's line is redrawn as results arrive. Exit status: the playbook's (the last non-zero one with
--repeat), 2 when the runner itself could not start it.

`--every S` is the period between the starts of consecutive runs (like a schedule); a run longer than that is
followed at once by the next, never overlapped (AWX may overlap runs: the health probe's store allows that).
Runner artifacts go to a temporary directory removed afterwards, unless --artifacts names one to keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from reports import yamlio

STATUSES = ("ok", "changed", "failed", "unreachable", "skipped", "ignored")
_EVENT_STATUS = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_unreachable": "unreachable",
                 "runner_on_skipped": "skipped", "runner_item_on_failed": None, "runner_item_on_ok": None}


def project_root() -> Path:
    """The directory holding ansible.cfg and playbooks/: the checkout (or an installed collection's root)."""
    here = Path(__file__).resolve().parents[2]
    for candidate in (Path.cwd(), here):
        if (candidate / "ansible.cfg").exists() and (candidate / "playbooks").is_dir():
            return candidate
    return here


class Progress:
    """An ansible-runner event handler that shows where the run is: play, task, host counts, elapsed time."""

    def __init__(self, stream=None, live: bool | None = None, label: str = ""):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.label = label
        self.t0 = time.monotonic()
        self.task = None
        self.counts: dict[str, int] = {}
        self.hosts: dict[str, str] = {}  # host -> worst status of the run
        self.lines: list[str] = []  # what was printed (tests read it)

    def _text(self) -> str:
        counts = ", ".join("%s %d" % (k, v) for k, v in self.counts.items() if v) or "waiting"
        return "%s[%6.1fs] %s: %s" % (self.label, time.monotonic() - self.t0, self.task, counts)

    def _emit(self, final: bool) -> None:
        text = self._text()
        if self.live:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        elif final:
            self.stream.write(text + "\n")
        if final:
            self.lines.append(text)
        self.stream.flush()

    def _close_task(self) -> None:
        if self.task is not None:
            self._emit(final=True)
        self.task, self.counts = None, {}

    def __call__(self, event: dict) -> bool:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self._close_task()
            line = "%s[%6.1fs] PLAY %s" % (self.label, time.monotonic() - self.t0, data.get("play") or data.get("name"))
            self.stream.write(line + "\n")
            self.lines.append(line)
        elif kind == "playbook_on_task_start":
            self._close_task()
            self.task = data.get("task") or data.get("name") or "?"
            self._emit(final=False)
        elif kind in _EVENT_STATUS and _EVENT_STATUS[kind]:
            status = _EVENT_STATUS[kind]
            res = data.get("res") or {}
            if status == "ok" and res.get("changed"):
                status = "changed"
            if kind == "runner_on_failed" and data.get("ignore_errors"):
                status = "ignored"
            self.counts[status] = self.counts.get(status, 0) + 1
            host = data.get("host")
            if host:
                order = {s: i for i, s in enumerate(("skipped", "ok", "changed", "ignored", "failed", "unreachable"))}
                prev = self.hosts.get(host)
                if prev is None or order.get(status, 0) > order.get(prev, 0):
                    self.hosts[host] = status
            if self.live:
                self._emit(final=False)
        elif kind == "playbook_on_stats":
            self._close_task()
        return True


@dataclass
class RunResult:
    playbook: str
    status: str
    rc: int
    duration_s: float
    stats: dict = field(default_factory=dict)
    hosts: dict = field(default_factory=dict)
    progress: list = field(default_factory=list)
    stdout: str = ""
    artifacts: str | None = None


def parse_extravars(items) -> dict:
    """-e values as ansible-playbook takes them: key=value words, a JSON/YAML mapping, or @file."""
    out: dict = {}
    for item in items or []:
        text = item.strip()
        if text.startswith("@"):
            with open(text[1:], encoding="utf-8") as fh:
                value = yamlio.safe_load(fh) or {}
        elif text.startswith("{"):
            value = yamlio.safe_load(text)
        else:
            value = {}
            for word in shlex.split(text):
                key, sep, val = word.partition("=")
                if not sep:
                    raise ValueError("extra var %r: want key=value, a mapping, or @file" % word)
                value[key] = val
        if not isinstance(value, dict):
            raise ValueError("extra vars %r are not a mapping" % item)
        out.update(value)
    return out


def run_playbook(playbook: str, inventory: str | None = None, extravars: dict | None = None, limit: str | None = None,
                 tags: str | None = None, envvars: dict | None = None, progress: Progress | None = None,
                 project_dir: str | os.PathLike | None = None, artifacts: str | None = None,
                 timeout: int | None = None, verbosity: int | None = None) -> RunResult:
    """One ansible-runner run of `playbook` (path relative to the project directory, or absolute)."""
    import ansible_runner

    project = Path(project_dir or project_root()).resolve()
    env = {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    if (project / "ansible.cfg").exists() and "ANSIBLE_CONFIG" not in os.environ:
        env["ANSIBLE_CONFIG"] = str(project / "ansible.cfg")
    # ansible-runner starts ansible-playbook from PATH: this interpreter's bin directory goes first.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    env.update(envvars or {})
    private = artifacts or tempfile.mkdtemp(prefix="clustermax-run-")
    os.makedirs(private, exist_ok=True)
    progress = progress if progress is not None else Progress()
    playbook_path = Path(playbook)
    if not playbook_path.is_absolute():
        playbook_path = (Path.cwd() / playbook_path) if (Path.cwd() / playbook_path).exists() else project / playbook
    kwargs = {"private_data_dir": private, "project_dir": str(project), "playbook": str(playbook_path),
              "envvars": env, "extravars": extravars or {}, "quiet": True, "event_handler": progress,
              "timeout": timeout}
    if inventory:
        kwargs["inventory"] = os.path.abspath(inventory)
    if limit:
        kwargs["limit"] = limit
    if tags:
        kwargs["tags"] = tags
    if verbosity:
        kwargs["verbosity"] = verbosity
    t0 = time.monotonic()
    try:
        runner = ansible_runner.run(**kwargs)
        stdout = runner.stdout.read() if runner.stdout else ""
        stats = runner.stats or {}
        rc = int(runner.rc) if runner.rc is not None else 2
        result = RunResult(playbook=str(playbook_path), status=runner.status, rc=rc, duration_s=time.monotonic() - t0,
                           stats=stats, hosts=dict(progress.hosts), progress=list(progress.lines), stdout=stdout,
                           artifacts=private if artifacts else None)
    finally:
        if not artifacts:
            shutil.rmtree(private, ignore_errors=True)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="clustermax-run", description=__doc__.splitlines()[0])
    parser.add_argument("playbook")
    parser.add_argument("-i", "--inventory")
    parser.add_argument("-e", "--extra-vars", action="append", default=[])
    parser.add_argument("-l", "--limit")
    parser.add_argument("-t", "--tags")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("--repeat", type=int, default=1, help="run this many times (a bounded loop)")
    parser.add_argument("--every", type=float, default=0.0, help="seconds between the starts of repeated runs")
    parser.add_argument("--timeout", type=int, help="seconds one run may take")
    parser.add_argument("--artifacts", help="keep ansible-runner's private data directory here")
    parser.add_argument("--project-dir", help="directory with ansible.cfg and playbooks/ (default: the checkout)")
    parser.add_argument("--show-output", action="store_true", help="print ansible's own output after each run")
    parser.add_argument("--json", action="store_true", help="print a JSON summary of each run on stdout")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    try:
        extravars = parse_extravars(args.extra_vars)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    worst = 0
    for i in range(args.repeat):
        started = time.monotonic()
        label = "[%d/%d] " % (i + 1, args.repeat) if args.repeat > 1 else ""
        try:
            res = run_playbook(args.playbook, args.inventory, extravars, args.limit, args.tags,
                               progress=Progress(label=label), project_dir=args.project_dir,
                               artifacts=os.path.join(args.artifacts, "%03d" % (i + 1)) if args.artifacts else None,
                               timeout=args.timeout, verbosity=args.verbose or None)
        except Exception as exc:  # noqa: BLE001 - the runner could not even start the playbook
            print("clustermax-run: %s" % exc, file=sys.stderr)
            return 2
        if args.show_output:
            sys.stdout.write(res.stdout)
        if args.json:
            print(json.dumps({"run": i + 1, "playbook": res.playbook, "status": res.status, "rc": res.rc,
                              "duration_s": round(res.duration_s, 3), "hosts": res.hosts}))
        print("%s%s: %s (rc %d) in %.1fs" % (label, os.path.basename(res.playbook), res.status, res.rc,
                                            res.duration_s), file=sys.stderr)
        worst = res.rc or worst
        if i + 1 < args.repeat and args.every > 0:
            time.sleep(max(0.0, args.every - (time.monotonic() - started)))
    return worst


if __name__ == "__main__":
    sys.exit(main())
