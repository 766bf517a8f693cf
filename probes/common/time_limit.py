"""The probe's time limit: SIGALRM raises ProbeTimeout wherever the probe is, and its finally blocks stop what it
started (probes/common/procs.py, launch.py, worlds.py) before probes.cli records the error.

An exception raised where Python cannot pass it on (a weakref callback or a finalizer, which garbage collection
runs between any two bytecodes of the probe) is printed as "Exception ignored in" and dropped. The alarm is one
shot, so a limit dropped there never rang again and the probe ran on with no limit (seen once in CI: the limit
raised inside a WeakSet callback). A dropped limit now rings again at once, until code that handles it has it.
"""

import contextlib
import signal
import sys

AGAIN_S = 0.05  # a dropped limit rings again after this long


class ProbeTimeout(BaseException):
    """The probe's time limit. Not an Exception: a probe's `except Exception` (a step that failed, the next one
    tried) must not swallow it, or the one-shot alarm never rings again and the probe runs on without a limit."""


def _raise(signum, frame):
    raise ProbeTimeout()


@contextlib.contextmanager
def time_limit(seconds, on_alarm=_raise):
    """Raise what on_alarm raises (ProbeTimeout) after `seconds`, inside the with block; the alarm, the handler and
    sys.unraisablehook are as they were afterwards. Tests give their own on_alarm, which may re-arm the timer and
    return until what they test is up."""
    raised = []

    def ring(signum, frame):
        try:
            on_alarm(signum, frame)
        except BaseException as exc:
            raised[:] = [exc]
            raise

    def dropped(unraisable):
        if raised and unraisable.exc_value is raised[0]:
            signal.setitimer(signal.ITIMER_REAL, AGAIN_S)
        else:
            previous_hook(unraisable)

    previous_hook = sys.unraisablehook
    previous_handler = signal.signal(signal.SIGALRM, ring)
    sys.unraisablehook = dropped
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        sys.unraisablehook = previous_hook
