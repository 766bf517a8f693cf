"""Why a tool a probe needs is missing: the reason the tools step recorded (params `tools_step.missing`, from the
tools role: the command that failed, the last lines of its output, the variable that controls it), so that a
not-installed skip says what went wrong and what to change, instead of blaming the node. Also what a tool can do
where that decides whether a probe runs it: fio's http engine (the S3 runs need it; the tools step builds an fio
that has it, and checks the build with the same test)."""

from probes.common.command import run_cmd


def not_installed(params, tool, reason):
    """The skip reason for a missing tool: the probe's own reason, then the tools step's, where it has one."""
    why = ((params.get("tools_step") or {}).get("missing") or {}).get(tool)
    return "%s; the tools step: %s" % (reason, why) if why else reason


def fio_without_http(fio="fio"):
    """None when this fio has the http engine (S3), else why not."""
    res = run_cmd([fio, "--enghelp"], timeout=30)
    if res.missing:
        return "%s is not installed" % fio
    engines = (res.stdout + res.stderr).split()
    return None if "http" in engines else "this fio has no http engine (built without libcurl): `fio --enghelp`"
