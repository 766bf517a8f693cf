"""ansible-playbook, with its CPU recorded by part (bench_scale.py --parts; issue 24):

    python controller_parts.py OUT.jsonl <ansible-playbook arguments>

Runs ansible-core's ansible-playbook in this process, as its own script does, and appends to OUT.jsonl:

  * one line per forked worker, when it ends: its task and host, its own CPU (ansible-core's task executor, our
    action plugins) and the CPU of the processes it ran and reaped (the ssh clients: the first one to a host does
    the SSH key exchange, then detaches the ControlPersist master, which is not counted here);
  * one last line for ansible-playbook's own process: its CPU (strategy, variables, forks, results, callbacks) and
    that of every child it reaped (the workers with their ssh clients, and the report build).

What is in neither (the ControlPersist masters, orphaned when their client exits) is the bench's total less these.
"""

import json
import resource
import sys


def _cpu(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def main():
    out = sys.argv[1]
    sys.argv = ["ansible-playbook"] + sys.argv[2:]
    from ansible.executor.process import worker  # noqa: PLC0415 - after argv, as the script imports it

    run_worker = worker.WorkerProcess._run

    def recorded(self):
        try:
            return run_worker(self)
        finally:
            line = {"part": "worker", "task": self._task.get_name(), "host": self._host.get_name(),
                    "self_s": _cpu(resource.RUSAGE_SELF), "children_s": _cpu(resource.RUSAGE_CHILDREN)}
            with open(out, "a") as fh:  # one short write per worker: lines of concurrent workers do not mix
                fh.write(json.dumps(line) + "\n")

    worker.WorkerProcess._run = recorded
    from ansible.cli.playbook import main as playbook  # noqa: PLC0415

    try:
        return playbook()
    finally:
        with open(out, "a") as fh:
            fh.write(json.dumps({"part": "ansible-playbook", "self_s": _cpu(resource.RUSAGE_SELF),
                                 "children_s": _cpu(resource.RUSAGE_CHILDREN)}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
