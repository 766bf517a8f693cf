"""Stand-ins the unit tests share: tests/fixtures/fakebin/fake_slurm.py as scontrol and srun on PATH."""

import json
import os
from pathlib import Path

FAKEBIN = Path(__file__).resolve().parent / "fixtures" / "fakebin"


def install_fake_slurm(tmp_path, monkeypatch, nodes):
    """scontrol and srun on PATH answering from a JSON state file of nodes ({node: {"State", "Reason"}})."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("scontrol", "srun"):
        (bindir / tool).symlink_to(FAKEBIN / "fake_slurm.py")
    state = tmp_path / "slurm.json"
    state.write_text(json.dumps(nodes))
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    monkeypatch.setenv("FAKE_SLURM_STATE", str(state))
    return state
