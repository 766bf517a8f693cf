"""Ctrl-C must end the controller: the root cause of a hung interrupted run, and the callback's answer to it.

ansible-core's SIGINT handler (TaskQueueManager._signal_handler) sends SIGINT to every forked worker before it raises
KeyboardInterrupt; a worker's handler (WorkerProcess._term) kills the worker at once. A worker that is in the middle of
putting a large result into the results queue (ansible's FinalQueue, a multiprocessing SimpleQueue) holds the queue's
write lock, and a dead holder never releases it: the controller then blocks for ever putting its own end marker into
the queue (StrategyBase.cleanup). That hung a clean-clone run's interrupted burn-in (2026-12-05). These tests run
ansible-core's own queue and worker handler in child processes (nothing of the scenario is left in pytest's process):
the hang, then the order the callback makes ansible-core follow (the end marker first, the workers ended after), then
the callback's SIGINT handler itself."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The checkout is the collection through .collections/ansible_collections/clustermax/assess -> ../../..
if str(ROOT / ".collections") not in sys.path:
    sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.clustermax.assess.plugins.callback import assessment  # noqa: E402

# A controller and one worker: the worker blocks putting an 8 MiB result (nobody reads yet), holding the write lock.
SCENARIO = textwrap.dedent("""
    import os, signal, sys, threading, time, types
    from ansible.executor.process.worker import WorkerProcess
    from ansible.executor.task_queue_manager import FinalQueue
    from ansible.utils.multiprocessing import context as ctx

    def worker(q, ready):
        os.setsid()  # as WorkerProcess._detach
        me = types.SimpleNamespace(pid=os.getpid())
        signal.signal(signal.SIGINT, lambda s, f: WorkerProcess._term(me, s, f))
        signal.signal(signal.SIGTERM, lambda s, f: WorkerProcess._term(me, s, f))
        ready.set()
        q.put(b"x" * (8 << 20))

    q, ready = FinalQueue(), ctx.Event()
    p = ctx.Process(target=worker, args=(q, ready))
    p.start()
    ready.wait(10)
    deadline = time.monotonic() + 20
    while "pipe_write" not in open("/proc/%d/wchan" % p.pid).read():  # in the write, holding the lock
        assert time.monotonic() < deadline, "the worker never blocked in its write"
        time.sleep(0.01)

    def drain():  # the controller's results thread
        while True:
            if q.get() == "end":
                return

    def put_end():
        q.put("end")

    order = sys.argv[1]
    reader = threading.Thread(target=drain, daemon=True)
    marker = threading.Thread(target=put_end, daemon=True)
    if order == "ansible":  # TaskQueueManager._signal_handler: SIGINT to the worker, then the controller's cleanup
        os.kill(p.pid, signal.SIGINT)
        p.join(10)
        reader.start()
        marker.start()
    else:  # the callback's: the controller's cleanup first, the worker ended after (_cleanup_processes: SIGTERM)
        reader.start()
        marker.start()
        marker.join(20)
        p.terminate()
        p.join(10)
    marker.join(5)
    print("worker exit %s; end marker %s" % (p.exitcode, "blocked" if marker.is_alive() else "put"), flush=True)
    os._exit(0)
""")


def _scenario(order):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", SCENARIO, order], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_worker_signalled_in_the_middle_of_a_result_leaves_the_results_queue_locked_for_ever():
    # the worker died by SIGINT, and the controller's end marker can never go in: the hang
    assert _scenario("ansible") == "worker exit -2; end marker blocked"


def test_the_end_marker_first_then_the_workers_ended_never_blocks():
    # the worker's result was read, the end marker went in, and the worker ended after (its own handler's SIGTERM,
    # or done already): nothing blocks
    assert _scenario("callback") in ("worker exit -15; end marker put", "worker exit 0; end marker put")


HANDLER = textwrap.dedent("""
    import os, signal, sys
    from ansible_collections.clustermax.assess.plugins.callback.assessment import CallbackModule
    calls = []
    signal.signal(signal.SIGINT, lambda s, f: calls.append(s))  # stands where ansible-core's forwarding handler is
    CallbackModule._interrupt_without_forwarding(os.getpid())
    try:
        os.kill(os.getpid(), signal.SIGINT)
        print("not interrupted")
    except KeyboardInterrupt:
        print("KeyboardInterrupt; forwarding handler called %d times; SIGINT now %s" % (
            len(calls), "default" if signal.getsignal(signal.SIGINT) == signal.SIG_DFL else "other"))
""")


def test_ctrl_c_raises_keyboardinterrupt_in_the_controller_without_signalling_the_workers():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", HANDLER], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    # a second Ctrl-C ends the controller at once, as ansible-core's own handler leaves it
    assert out.stdout.strip() == "KeyboardInterrupt; forwarding handler called 0 times; SIGINT now default"
    assert callable(assessment.CallbackModule._interrupt_without_forwarding)
