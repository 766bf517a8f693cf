"""What ansible-playbook loads once, before it forks its workers, so that no worker loads it again.

ansible-core forks one worker per host and task, and a worker inherits what the controller process has loaded. The
Jinja filter and test plugins are loaded lazily, the first time a template needs one in that process: every file of
ansible's own filters and tests is imported and wrapped, about 50 ms of CPU. A `when` or an argument with a filter
(`| default(false)`) or a test (`is defined`) is templated in the worker, so where the controller has not loaded
them yet, every worker of that task loads them all again, then exits. Measured on 16 test hosts (the audit run,
tests/benchmarks/bench_scale.py): the cleanup task's worker took 71 ms of CPU per host, 20 ms once the controller
had loaded them; the run's controller CPU fell by 0.7 s.

The callback plugin calls :func:`load_jinja_plugins` at each play's start (in the controller, before that play forks
a worker). ansible-core forgets the loaded plugins when a role adds a plugin directory, so a later play loads them
again; when nothing was forgotten it costs nothing. A filter or test of a collection (FQCN) is still loaded where it is
first used; the project's templates use ansible's own.
"""

from __future__ import annotations


def load_jinja_plugins():
    """Load ansible-core's Jinja filter and test plugins in this process (what Jinja2Loader.all() does before it
    lists them: import every file once and keep the wrappers). Returns how many of each are loaded."""
    from ansible.plugins.loader import filter_loader, test_loader  # noqa: PLC0415 - only inside ansible-playbook

    return {"filters": sum(1 for _ in filter_loader.all()), "tests": sum(1 for _ in test_loader.all())}
