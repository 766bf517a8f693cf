"""A run directory written from Artifact objects, as the controller fetches one, and loaded back (graders' tests)."""

import json
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
