"""The load generator: vLLM's own `vllm bench serve` (vllm.benchmarks.serve), run once per point of a sweep in one
process, so the engine's Python imports vllm once for the whole sweep instead of once per point.

Runs in the engine's Python (where vllm is importable), not in the probes' Python: the rank job writes this file
into its work directory and starts it as `python loadgen.py PLAN.json`. PLAN.json: {"base_url", "model",
"result_dir", "points": [{"name", "args": [...]}]}; each point's args are `vllm bench serve` arguments (dataset,
lengths, --max-concurrency, --num-prompts). Every point adds --save-result --save-detailed and its result file.

One JSON line per point in the plan's "events" file: {"event": "start"|"done"|"error"|"skip", "name", "t",
"file"|"error"|"reason"}; the tool's own printout goes to stdout (the caller's log). A point that raises is an error
line and the sweep goes on with the next point (the caller stops it when the server is gone). Points of one
"group" (a scenario at rising concurrency) stop at saturation: when a point's output tokens/s is below
plan["saturation_gain"] x the previous point's, the group's remaining points are skipped (0: never).
Nothing here judges a number: the result files are the tool's own JSON, read by probes/inference/bench_result.py.
"""

import json
import os
import sys
import time
import traceback


class Events:
    def __init__(self, path):
        self.fh = open(path, "a", buffering=1)

    def __call__(self, **record):
        record["t"] = time.time()
        self.fh.write(json.dumps(record) + "\n")
        self.fh.flush()


def main(plan_path):
    with open(plan_path) as fh:
        plan = json.load(fh)
    say = Events(plan["events"])
    gain = float(plan.get("saturation_gain") or 0)
    last, saturated, saturated_at = {}, set(), {}
    try:
        from vllm.benchmarks.serve import add_cli_args  # noqa: PLC0415 - only the engine's Python has vllm
        from vllm.benchmarks.serve import main as bench_main  # noqa: PLC0415
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001 - an old or broken vllm: said, not raised
        say(event="error", name="import", error="cannot import vllm.benchmarks.serve: %s" % exc)
        return 2
    for point in plan["points"]:
        name, group = point["name"], point.get("group")
        if group in saturated:
            say(event="skip", name=name, reason="saturated: %s" % saturated_at[group])
            continue
        result = "%s.json" % name
        argv = ["--backend", plan.get("backend", "vllm"), "--base-url", plan["base_url"], "--model", plan["model"],
                "--save-result", "--save-detailed", "--result-dir", plan["result_dir"], "--result-filename", result,
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99"]
        argv += [str(a) for a in point["args"]]
        say(event="start", name=name, argv=argv)
        try:
            parser = FlexibleArgumentParser()
            add_cli_args(parser)
            bench_main(parser.parse_args(argv))
        except BaseException as exc:  # noqa: BLE001 - SystemExit from argparse too: the point failed, the sweep goes on
            lines = traceback.format_exception_only(type(exc), exc)
            say(event="error", name=name, error=("".join(lines).strip() or type(exc).__name__)[-600:])
            continue
        path = os.path.join(plan["result_dir"], result)
        if os.path.exists(path):
            say(event="done", name=name, file=path)
            rate = _output_rate(path)
            if group and gain and rate is not None and group in last and rate < gain * last[group][1]:
                saturated.add(group)
                saturated_at[group] = "%s gave %.4g output tokens/s, under %g x the %.4g of %s" % (
                    name, rate, gain, last[group][1], last[group][0])
            if rate is not None:
                last[group] = (name, rate)
        else:
            say(event="error", name=name, error="vllm bench serve wrote no result file %s" % path)
    return 0


def _output_rate(path):
    try:
        with open(path) as fh:
            value = json.load(fh).get("output_throughput")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, (int, float)) else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
