"""What ansible-playbook loads once, before it forks its workers, so that no worker loads it again.

ansible-core forks one worker per host and task, and a worker inherits what the controller process has loaded. The
Jinja filter and test plugins are loaded lazily, the first time a template needs one in that process: every file of
ansible's own filters and tests is imported and wrapped, about 50 ms of CPU. A `when` or an argument with a filter
(`| default(false)`) or a test (`is defined`) is templated in the worker, so where the controller has not loaded
them yet, every worker of that task loads them all again, then exits. Measured on 16 test hosts (the audit run,
per-worker accounting): the cleanup task's worker took 71 ms of CPU per host, 21 ms once the controller had loaded
them.

The callback plugin calls :func:`load_jinja_plugins` at each play's start (in the controller, before that play forks
a worker); when they are loaded already it costs about 0.1 ms. ansible-core forgets them only when a role of the old
layout with its own filter_plugins or test_plugins directory is added: at parse time (before the first play starts)
for a static one, and mid-play for an include_role of one, after which that play's workers load them again (this
collection's roles are collection roles: they add none). A filter or test of a collection (FQCN) is still loaded where
it is first used; the project's templates use ansible's own.
"""

from __future__ import annotations


def load_jinja_plugins():
    """Load ansible-core's Jinja filter and test plugins in this process (what Jinja2Loader.all() does before it
    lists them: import every file once and keep the wrappers). Returns how many of each are loaded, counting a
    plugin under its short and its ansible.builtin name. A plugin file that raises leaves nothing half-loaded: the
    loader's cache is emptied again, so a template loads them as ansible-core would have without this."""
    from ansible.plugins.loader import filter_loader, test_loader  # noqa: PLC0415 - only inside ansible-playbook

    counts = {}
    for kind, loader in (("filters", filter_loader), ("tests", test_loader)):
        try:
            counts[kind] = sum(1 for _ in loader.all())
        except Exception:
            # Jinja2Loader stops loading once its cache holds anything: a half-filled one would hide the rest
            loader._clear_caches()
            raise
    return counts
