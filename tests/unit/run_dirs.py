"""A run directory written from Artifact objects, as the controller fetches one, and loaded back (graders' tests)."""

import json

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
