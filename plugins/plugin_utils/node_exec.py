"""Commands on a node through the connection itself, not through a module.

The command module wraps every call in AnsiballZ: the controller's worker builds the module payload and the node
starts a Python that unpacks it and imports ansible's module_utils before our command runs (~0.25 s of node CPU and
a share of the worker's). Our commands need none of it: they are one argv (a probe, the run lock's code) whose
result is its exit status and output. Stdin always carries bytes: a command given stdin runs without a terminal
(ansible's ssh plugin adds -tt to a command without it, and on a terminal stderr, and whatever the node's login
prints, mix into stdout).
"""

import shlex

# What a command that reads nothing gets on stdin (see above).
NO_INPUT = b"\n"


def run(action, command, stdin=None):
    """{rc, stdout, stderr} of ``command`` (an argv list, or a shell command line) on the action's host, with
    become when the task has it."""
    if not isinstance(command, str):
        command = " ".join(shlex.quote(str(a)) for a in command)
    res = action._low_level_execute_command(command, sudoable=True, in_data=stdin or NO_INPUT)
    return {"rc": res.get("rc"), "stdout": res.get("stdout") or "", "stderr": res.get("stderr") or ""}


def last_json(res):
    """The JSON document on the last line of stdout (how the probes and the run lock answer), or None."""
    import json  # noqa: PLC0415

    lines = res["stdout"].strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def why(res):
    """The last line of stderr (else stdout): what a command that failed said last."""
    lines = (res["stderr"] or res["stdout"] or "no output").strip().splitlines()
    return lines[-1] if lines else ""
