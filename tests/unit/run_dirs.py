"""A run directory written from Artifact objects, as the controller fetches one, and loaded back (graders' tests)."""

import json
import re
import tarfile
from pathlib import Path

from probes.artifact import artifact_filename, write_json_atomic
from reports import load


def write_and_load_run(tmp_path, arts, hosts, profile):
    """runs/<…>/run with assess_run.json (the inventory: hosts, profile) and each artifact under artifacts/<host>/."""
    run_dir = tmp_path / "run"
    (run_dir / "artifacts").mkdir(parents=True)
    (run_dir / "assess_run.json").write_text(json.dumps({"hosts": hosts, "id": "r", "profile": profile}))
    for art in arts:
        write_json_atomic(str(run_dir / "artifacts" / art.host / artifact_filename(art.probe, art.variant)),
                          art.to_dict())
    return load.load_run(str(run_dir))


RECORDED_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "assessment_run" / "run.tar.xz"


def unpack_recorded_run(provider_dir):
    """The whole recorded 4-host run (tests/fixtures/assessment_run) as provider_dir/<run id>/, where assess.yml
    writes a run (runs/<provider>/<run id>/); returns its path. Nothing in it is changed."""
    with tarfile.open(RECORDED_RUN) as tar:
        tar.extractall(provider_dir, members=[m for m in tar.getmembers() if m.name.startswith("run/")],
                       filter="data")
    run = Path(provider_dir) / "run"
    run_id = json.loads((run / "assess_run.json").read_text())["id"]
    return run.rename(Path(provider_dir) / run_id)


def build_recorded(fixture, tmp):
    """A recorded run's tarball (tests/fixtures/<name>/run.tar.xz) unpacked into tmp and its report built from
    its artifacts, as `assess-report build` makes it; returns the run directory."""
    from reports.build import build

    with tarfile.open(fixture) as tar:
        tar.extractall(tmp, filter="data")
    build(str(Path(tmp) / "run"))
    return Path(tmp) / "run"


def interrupt_run(run_dir, before_play):
    """A recorded run as the controller leaves it when stopped as the play `before_play` starts: journal.jsonl cut
    at that play's start, no run.json (the play never reached its end), and only the files of the probes the cut
    journal names (<probe>.json, <probe>-<variant>.json, <probe>.<anything>). Returns run_dir."""
    run_dir = Path(run_dir)
    lines = (run_dir / "journal.jsonl").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines)
               if json.loads(line).get("event") == "play_start" and json.loads(line).get("play") == before_play)
    (run_dir / "journal.jsonl").write_text("".join(lines[:cut]))
    ran = {json.loads(line).get("probe") for line in lines[:cut]}
    (run_dir / "run.json").unlink()
    for path in (run_dir / "artifacts").glob("*/*"):
        if re.split(r"[.-]", path.name)[0] not in ran:
            path.unlink()
    return run_dir
