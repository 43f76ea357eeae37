"""The own loop's non-private baseline (issue 39): ``mechanism=None`` is refused with a pointer
to ``NoPrivacy()``, the explicit baseline, whose reports are released as they are, charged as
non-private (epsilon inf), reported with "no meaningful guarantee" and refused by the
auditor (nothing to refute)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import NoPrivacy
from ldp_audit.run import open_run


def test_none_points_to_no_privacy(tmp_path) -> None:
    with pytest.raises(InvalidParameterError, match=r"NoPrivacy\(\)"):
        open_run(tmp_path / "a", system="s", mechanism=None)
    assert not (tmp_path / "a").exists()


def test_no_privacy_baseline_end_to_end(tmp_path, capsys) -> None:
    priv = {"env_id": "my-simulator", "name": "force", "values": [1.0, 2.0]}
    with open_run(tmp_path / "base", system="toy", seed=0, mechanism=NoPrivacy(),
                  private=priv) as run:  # fmt: skip
        for agent in range(3):
            g = np.full(3, float(agent))
            rel = run.release(g, agent=agent, theta=np.zeros(3), secret=1.0, score=1.0)
            assert np.array_equal(rel.values[0], g)  # released as it is
    cfg = json.loads((tmp_path / "base" / "config.json").read_text())
    assert cfg["mechanism"]["name"] == "no_privacy"
    assert cfg["private_parameter"]["env_id"] == "my-simulator"  # a label, never made
    assert main(["audit", "--run-dir", str(tmp_path / "base")]) == 2
    assert "nothing to refute" in capsys.readouterr().err
    rep = tmp_path / "rep"
    assert main(["report", str(tmp_path / "base"), "--out", str(rep)]) == 0
    assert "NO MEANINGFUL GUARANTEE" in capsys.readouterr().out
