"""Note [A script that ends before the steps, under a policy] (memledger/measure/
worker.py): a script that ends cleanly before its first optimizer step (a library that
calls `exit()` while the model is built) is told so under a policy as without one."""

from __future__ import annotations

import json
import sys

import pytest

from memledger.errors import ScriptError
from memledger.measure import worker as measure_worker
from memledger.measure.runner import result_from_worker
from memledger.replay.policies import parse_policy

SCRIPT = """\
import torch
from torch import nn

model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
print("an optional dependency is missing")
exit()
"""


@pytest.mark.parametrize("policy", ["none", "checkpoint:0"])
def test_a_script_that_exits_before_any_step_is_told_so_under_any_policy(tmp_path, policy,
                                                                          monkeypatch):
    """GIVEN a script that builds its model and calls exit() WHEN measured over 2 steps
    THEN "the script ran 0 optimizer steps; measure needs 2", policy or not. Before, under
    `checkpoint:0`: "the policy never applied: no model ran in the 1 step taken (--steps
    1): the script called no module" (0 steps taken, 2 asked)."""
    script, out = tmp_path / "train.py", tmp_path / "measured.json"
    script.write_text(SCRIPT)
    monkeypatch.setattr(sys, "argv", ["worker"])
    code = measure_worker.main(["--out", str(out), "--policy", policy, "--steps", "2",
                                "--time-steps", "0", str(script)])
    res = json.loads(out.read_text())
    assert (code, res["steps"] if "steps" in res else 0) == (0, 0), res.get("error")
    with pytest.raises(ScriptError) as e:
        result_from_worker(res, parse_policy(policy), 2, 0)
    assert str(e.value).startswith("memledger: the script ran 0 optimizer steps; measure "
                                   "needs 2 for the peak")
    assert e.value.exit_code == 2
