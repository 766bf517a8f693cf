"""torchtitan's training log, read into step rows, run facts and error rows.

torchtitan logs through Python logging (torchtitan/tools/logging.py in the 0.3.0 wheel):

    [titan] 2026-02-24 19:46:17,508 - root - INFO - <message>

Launchers put their own label in front: torchrun's --tee gives "[<role><local rank>]:" ("[default0]:" with its
default role, "[rank0]:" with torchtitan's run_train.sh --role rank), srun --label gives "0: ".
Releases before mid-2025 had no "[titan]" ("2025-02-13 11:33:11,198 - root - INFO - ..."). The step line is one
f-string in MetricsProcessor.log (components/metrics.py), coloured with escape codes (tools/utils.py Color):

  0.3.0 step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.71  mfu: 13.99%
  2025  step: 10  loss:  9.8821  memory: 49.59GiB(35.46%)  tps: 7,026  mfu: 41.15%       (no grad_norm, no tflops)
  2024  step: 117  loss:  3.9053  memory: 36.20GiB(81.50%)  wps: 1,710  mfu: 23.50%     (wps: the same as tps)

"mfu: N/A" (0.3.0, a quantized run) is read as no MFU. Real captures of each variant, and where they came from, are in
tests/fixtures/torchtitan/README.md.

parse(text) returns {"tool", "steps", "facts", "errors"}:
  steps   one row per step number: {step, loss, grad_norm, memory_gib, memory_pct, tps, tflops, mfu_pct, rank, line};
          a field the line did not print is None. tps is tokens/s per GPU. When ranks are labelled only rank 0's lines
          count (the lowest labelled rank if rank 0 printed none); unlabelled copies of a step (every rank printing
          without a label) keep the first and count the others in facts["duplicate_step_lines"].
  facts   what the start-up lines say: model name/flavor and parameter counts, peak FLOPS used for MFU, GPU name and
          memory, torchtitan version, start step, batch sizes, sequence length, total/warmup steps, parallelism dims.
  errors  {line (1-based), kind, text, tool, rank, ...}: kind "oom", "nccl_timeout", "traceback" (with the exception
          line when found), "unparsed_step" (a line that looks like a step line but does not read, with its reason),
          or "no_steps" (line 0: no step line read in the whole input). Errors come from every rank. A step line
          must read completely (known fields, each once, loss and tps present) and print the same fields as the
          run's other step lines: a line cut between two fields reads, but lacks the fields its neighbours have.
"""

import re

TOOL = "torchtitan"

# Escape sequences, and the "[31m" left when a copy of the log lost the ESC byte.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\[(?:\d{1,3};)*\d{1,3}m")
# torchrun's --tee label: any role name (its --role, "default" unless given) then the rank
_RANK_LABEL = re.compile(r"^\[(?:[A-Za-z_][^\]\s]*?)?(\d+)\]:\s?")
_SRUN_LABEL = re.compile(r"^(\d+): ")
_LOG_HEADER = re.compile(r"^(?:\[titan\]\s*)?\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} - \S+ - [A-Z]+ - ")

_STEP_HEAD = re.compile(r"^step:\s*(\d+)(?:/\d+(?:\s*=\s*[\d.]+%)?)?(?=\s|$)")
_FIELD = re.compile(r"\s+([A-Za-z_]+):\s*(\S+)")
# "looks like a step line": both words, not torchtitan's validation line
_STEPISH = re.compile(r"(?<!validate )\bstep:\s*\d")
_LOSSISH = re.compile(r"\bloss:")

_NUMBER = re.compile(r"^-?(?:\d+(?:\.\d+)?|nan|inf)$")
_COUNT = re.compile(r"^\d{1,3}(?:,\d{3})*$|^\d+$")
_DECIMAL = re.compile(r"^\d{1,3}(?:,\d{3})*(?:\.\d+)?$|^\d+(?:\.\d+)?$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)GiB\((\d+(?:\.\d+)?)%\)$")
_PERCENT = re.compile(r"^(\d+(?:\.\d+)?)%$")

_OOM = re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|HIP out of memory")
_NCCL_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout|Timeout at NCCL work"
                           r"|NCCL (?:operations have failed or )?timed out")
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b")

_FACTS = (
    ("version", re.compile(r"torchtitan version: (\S+)"), str),
    ("model", re.compile(r"^Model (\S+) (\S+) size: ([\d,]+) total parameters"), None),
    ("params", re.compile(r"^Total parameter count: dense ([\d,]+), sparse ([\d,]+), active ([\d,]+)"), None),
    ("peak_flops", re.compile(r"^Peak FLOPS used for computing MFU: ([\d.]+e[+-]\d+)"), float),
    ("peak_flops_fallback", re.compile(r"^Peak flops undefined for: (.+?), fallback"), str),
    ("gpu", re.compile(r"^(\w+) capacity: (.+) with (\d+(?:\.\d+)?)GiB memory"), None),
    ("model_memory", re.compile(r"^(\w+) memory usage for model: (\d+(?:\.\d+)?)GiB\((\d+(?:\.\d+)?)%\)"), None),
    ("start_step", re.compile(r"^Training starts at step (\d+)"), int),
    ("local_batch_size", re.compile(r"local batch size (\d+)"), int),
    ("global_batch_size", re.compile(r"global batch size (\d+)"), int),
    ("grad_accum_steps", re.compile(r"gradient accumulation steps (\d+)"), int),
    ("seq_len", re.compile(r"sequence length (\d+)"), int),
    ("total_steps", re.compile(r"total steps (\d+)"), int),
    ("warmup_steps", re.compile(r"total steps \d+ \(warmup (\d+)\)"), int),
    ("parallelism", re.compile(r"^Building device mesh with parallelism: (.+)$"), None),
    ("mesh", re.compile(r"^Building \d+-D device mesh with \[(.*)\], \[(.*)\]"), None),
)


def _int(text):
    return int(text.replace(",", ""))


def split_line(raw):
    """(rank or None, message) of one log line: escape codes, launcher label and log header taken off."""
    line = _ANSI.sub("", raw).strip()
    rank = None
    # srun --label ("3: ") may wrap torchrun's own label ("[rank25]:"): the inner one is the global rank
    for label in (_SRUN_LABEL, _RANK_LABEL):
        m = label.match(line)
        if m:
            rank = int(m.group(1))
            line = line[m.end():]
    m = _LOG_HEADER.match(line)
    if m:
        line = line[m.end():]
    return rank, line.strip()


def _field_value(key, value):
    """The step row's entries for one `key: value`, or raise ValueError naming what is wrong."""
    if key == "loss" or key == "grad_norm":
        if not _NUMBER.match(value):
            raise ValueError("%s %r is not a number" % (key, value))
        return {key: float(value)}
    if key == "memory":
        m = _MEMORY.match(value)
        if not m:
            raise ValueError("memory %r is not NN.NNGiB(NN.NN%%)" % value)
        return {"memory_gib": float(m.group(1)), "memory_pct": float(m.group(2))}
    if key in ("tps", "wps"):
        # wps (words per second) is what torchtitan called tokens/s per GPU before it said tps
        if not _COUNT.match(value):
            raise ValueError("%s %r is not a count" % (key, value))
        return {"tps": _int(value)}
    if key == "tflops":
        if not _DECIMAL.match(value):
            raise ValueError("tflops %r is not a number" % value)
        return {"tflops": float(value.replace(",", ""))}
    if key == "mfu":
        if value == "N/A":  # 0.3.0 prints N/A when quantization makes the BF16 peak meaningless
            return {"mfu_pct": None}
        m = _PERCENT.match(value)
        if not m:
            raise ValueError("mfu %r is not NN.NN%%" % value)
        return {"mfu_pct": float(m.group(1))}
    raise ValueError("unknown field %r" % key)


def parse_step(message):
    """One step message -> {step, loss, grad_norm, memory_gib, memory_pct, tps, tflops, mfu_pct}; ValueError if it
    does not read completely: every field must be known, none twice, loss and tps (or wps) present."""
    m = _STEP_HEAD.match(message)
    if not m:
        raise ValueError("no step number")
    row = {"step": int(m.group(1)), "loss": None, "grad_norm": None, "memory_gib": None, "memory_pct": None,
           "tps": None, "tflops": None, "mfu_pct": None}
    seen = set()
    pos = m.end()
    rest = message.rstrip()
    while pos < len(rest):
        f = _FIELD.match(rest, pos)
        if not f:
            raise ValueError("unreadable text %r" % rest[pos:].strip())
        key = "tps" if f.group(1) == "wps" else f.group(1)
        if key in seen:
            raise ValueError("field %r twice" % f.group(1))
        seen.add(key)
        row.update(_field_value(f.group(1), f.group(2)))
        pos = f.end()
    for need in ("loss", "tps"):
        if need not in seen:
            raise ValueError("no %s" % ("tps/wps" if need == "tps" else need))
    row["fields"] = tuple(f.group(1) for f in _FIELD.finditer(rest, m.end()))
    return row


def _fact(name, m, conv, facts):
    if conv is not None:
        facts[name] = conv(m.group(1))
    elif name == "model":
        facts.update(model_name=m.group(1), model_flavor=m.group(2), total_params=_int(m.group(3)))
    elif name == "params":
        facts.update(params_dense=_int(m.group(1)), params_sparse=_int(m.group(2)), params_active=_int(m.group(3)))
    elif name == "gpu":
        facts.update(device_type=m.group(1), gpu_name=m.group(2).strip(), gpu_memory_gib=float(m.group(3)))
    elif name == "model_memory":
        facts.update(model_memory_gib=float(m.group(2)), model_memory_pct=float(m.group(3)))
    elif name == "parallelism":
        # "pp=1, dp_replicate=1, dp_shard=8, cp=1, tp=1, ep=1, etp=1"
        dims = dict(kv.split("=", 1) for kv in m.group(1).replace(" ", "").split(",") if "=" in kv)
        facts["parallelism"] = {k: int(v) for k, v in dims.items() if v.lstrip("-").isdigit()}
    elif name == "mesh":
        # older releases: "Building 1-D device mesh with ['dp_shard'], [8]"
        names = [n.strip(" '\"") for n in m.group(1).split(",") if n.strip()]
        sizes = [int(s) for s in m.group(2).split(",") if s.strip().isdigit()]
        if len(names) == len(sizes) and "parallelism" not in facts:
            facts["parallelism"] = dict(zip(names, sizes))


def read_facts(message, facts, done):
    """Facts from one message; the first line that states a fact wins (ranks repeat them)."""
    for name, rx, conv in _FACTS:
        if name in done:
            continue
        m = rx.search(message)
        if m:
            _fact(name, m, conv, facts)
            done.add(name)


def _error(lineno, kind, raw, rank, **extra):
    row = {"line": lineno, "kind": kind, "text": _ANSI.sub("", raw).strip(), "tool": TOOL, "rank": rank}
    row.update(extra)
    return row


def _exception_after(lines, start, rank):
    """The exception line that ends the traceback starting at lines[start] (same rank label), or None."""
    for raw in lines[start + 1:start + 400]:
        r, message = split_line(raw)
        if r != rank:
            continue
        if _TRACEBACK.match(message):
            return None
        if _EXCEPTION.match(message):
            return message
    return None


def _line_errors(lines, i, raw, rank, message):
    """Error rows for one line that is not a step line."""
    if _OOM.search(message):
        return [_error(i + 1, "oom", raw, rank)]
    if _NCCL_TIMEOUT.search(message):
        return [_error(i + 1, "nccl_timeout", raw, rank)]
    if _TRACEBACK.match(message):
        return [_error(i + 1, "traceback", raw, rank, exception=_exception_after(lines, i, rank))]
    if _STEPISH.search(message) and _LOSSISH.search(message):
        # a step line with something in front of it: two processes' output interleaved on one line
        return [_error(i + 1, "unparsed_step", raw, rank,
                       reason="%s step line not at the start of its line (interleaved output)" % TOOL)]
    return []


def _odd_field_sets(candidates):
    """Rows whose fields differ from the run's usual step line, with the reason. One torchtitan prints every step line
    with the same fields, so a line with fewer is a cut one even when the cut fell between fields ("tps: 5")."""
    counts = {}
    for row in candidates:
        counts[row["fields"]] = counts.get(row["fields"], 0) + 1
    usual = max(counts, key=lambda fields: (counts[fields], len(fields)))
    odd = []
    for row in candidates:
        if row["fields"] != usual:
            missing = [f for f in usual if f not in row["fields"]]
            extra = [f for f in row["fields"] if f not in usual]
            odd.append((row, "%s step line: fields differ from the run's other step lines (missing %s, extra %s; "
                             "cut line?)" % (TOOL, ", ".join(missing) or "none", ", ".join(extra) or "none")))
    return odd


def _pick_rank(candidates):
    """The rank whose step lines count: 0, else the lowest labelled one, else None (no labels)."""
    ranks = {row["rank"] for row in candidates if row["rank"] is not None}
    if not ranks:
        return None
    return 0 if 0 in ranks else min(ranks)


def parse(text):
    lines = text.splitlines()
    facts, done, errors, candidates = {}, set(), [], []
    for i, raw in enumerate(lines):
        rank, message = split_line(raw)
        if message.startswith("step:"):
            try:
                row = parse_step(message)
            except ValueError as e:
                errors.append(_error(i + 1, "unparsed_step", raw, rank, reason="%s step line: %s" % (TOOL, e)))
                continue
            row.update(rank=rank, line=i + 1)
            candidates.append(row)
            facts.setdefault("throughput_field", "wps" if re.search(r"\bwps:", message) else "tps")
            continue
        read_facts(message, facts, done)
        errors.extend(_line_errors(lines, i, raw, rank, message))
    if candidates:
        for row, reason in _odd_field_sets(candidates):
            errors.append(_error(row["line"], "unparsed_step", lines[row["line"] - 1], row["rank"], reason=reason))
            candidates.remove(row)
        errors.sort(key=lambda e: e["line"])
    chosen = _pick_rank(candidates)
    steps, seen, duplicates = [], set(), 0
    for row in candidates:
        if chosen is not None and row["rank"] != chosen:
            continue
        if row["step"] in seen:
            duplicates += 1
            continue
        seen.add(row["step"])
        steps.append({k: v for k, v in row.items() if k != "fields"})
    if duplicates:
        facts["duplicate_step_lines"] = duplicates
    if chosen is not None:
        facts["step_rank"] = chosen
    if not steps:
        errors.append({"line": 0, "kind": "no_steps", "tool": TOOL, "rank": None,
                       "text": "%s: no step line read in %d lines of log" % (TOOL, len(lines))})
    return {"tool": TOOL, "steps": steps, "facts": facts, "errors": errors}
