"""Why a tool a probe needs is missing: the reason the tools step recorded (params `tools_step.missing`, from the
tools role: the command that failed, the last lines of its output, the variable that controls it), so that a
not-installed skip says what went wrong and what to change, instead of blaming the node."""


def not_installed(params, tool, reason):
    """The skip reason for a missing tool: the probe's own reason, then the tools step's, where it has one."""
    why = ((params.get("tools_step") or {}).get("missing") or {}).get(tool)
    return "%s; the tools step: %s" % (reason, why) if why else reason
