"""Optimizers from outside torch.optim on one residual MLP (tests/clients/train_optimizers.py):
13,252 fp32 parameters, 53,008 B. Each ledger's optimizer state is checked against the
optimizer's own formula; the ledger equals the allocator. The torch-only cases (an optimizer
written by hand) always run; the libraries' skip without them."""

from __future__ import annotations

import pytest

from tests.clients.harness import HERE, run_client

pytestmark = pytest.mark.clients

PARAMS = 53_008   # bytes of parameters (and of one full-size state tensor per parameter)
# embed [32, 16], blocks.*.up [64, 32], blocks.*.down [32, 64], head [4, 32]: rows + columns
FACTORED = (32 + 16) + 3 * 2 * (64 + 32) + (4 + 32)
BIASES = 32 + 3 * (64 + 32) + 4                 # the 1-D parameters, in elements
N_TENSORS = 16


def _resident(run) -> dict[str, int]:
    return run.summary.resident


def test_state_kept_outside_optimizer_state():
    """Note [State outside optimizer.state] (trace/optimizer_state.py): momenta in an
    attribute of the optimizer, made at its second step, read as `temporary` (53,008 B), and
    the learning rate, a tensor in the param group, as `other` (4 B). Now both are
    optimizer state; the ledger equals the allocator."""
    run = run_client("train_optimizers.py", ["--opt", "homegrown", "--steps", "4"], [])
    assert run.ledger_peak == run.allocator_peak
    res = _resident(run)
    assert res["optimizer_state"] == PARAMS + 4
    assert res["other"] == 0
    # Note [Resident at the end] (ledger/model.py): the script's loss (mean, nll_loss)
    assert res["temporary"] == 8


def test_a_tensor_learning_rate_is_optimizer_state():
    """torch's Adam with `lr=torch.tensor(1e-3)`: exp_avg + exp_avg_sq + a 4 B step per
    parameter, and the learning rate's 4 B (read as `other` before)."""
    run = run_client("train_optimizers.py", ["--opt", "adam_tensor_lr", "--steps", "4"], [])
    assert run.ledger_peak == run.allocator_peak
    assert _resident(run)["optimizer_state"] == 2 * PARAMS + 4 * N_TENSORS + 4
    assert _resident(run)["other"] == 0


def test_doctor_sees_a_step_that_writes_through_data():
    """Note [A step that writes through .data] (trace/doctor_probe.py): `p.data.sub_(...)`
    moves no version counter of `p`; the doctor warned no_update on every step."""
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(HERE / "train_optimizers.py",
                                          ["--opt", "homegrown_data", "--steps", "4"], 3)
    assert outcome.code == 0, outcome.reason
    assert report.findings == [], report.findings


# (library, --opt, optimizer state resident at the end, in bytes)
STATE = [
    ("lion_pytorch", "lion", PARAMS),                                  # exp_avg
    ("torch_optimizer", "lamb", 2 * PARAMS + 3 * 4 * N_TENSORS),       # + 3 norms kept
    ("torch_optimizer", "adafactor_to", 4 * (FACTORED + BIASES) + 4 * N_TENSORS),   # + RMS
    # precond + inv_precond per dimension (d x d), and the last preconditioned gradient
    # (embed: weight 32, 16, bias 32; a block's up 64, 32 and 64, down 32, 64 and 32; head)
    ("torch_optimizer", "shampoo", 4 * 2 * (32**2 + 16**2 + 32**2
                                            + 3 * (3 * 64**2 + 3 * 32**2)
                                            + 4**2 + 32**2 + 4**2) + PARAMS),
    ("schedulefree", "sf_adamw", 2 * PARAMS),                          # z, exp_avg_sq
    ("prodigyopt", "prodigy", 4 * PARAMS),                             # s, p0, exp_avg(_sq)
    # exp_avg; row and column of exp_avg_sq and of the residual; RMS
    ("came_pytorch", "came", PARAMS + 4 * (2 * FACTORED + BIASES) + 4 * N_TENSORS),
]


@pytest.mark.parametrize("lib,opt,state", STATE, ids=[s[1] for s in STATE])
def test_state_bytes_match_the_optimizers_formula(lib, opt, state):
    pytest.importorskip(lib)
    run = run_client("train_optimizers.py", ["--opt", opt, "--steps", "4"], [])
    assert run.ledger_peak == run.allocator_peak
    assert _resident(run)["optimizer_state"] == state


def test_schedulefree_swap_and_policies():
    """schedulefree's `optimizer.eval()` / `train()` rewrite the parameters in place between
    steps (an evaluation after each); `denom`, a `_foreach_div` held to step()'s return,
    read as 53,016 B of temporaries resident at the end (Note [Resident at the end]); each
    policy is predicted to the byte (found so at once)."""
    pytest.importorskip("schedulefree")
    run = run_client("train_optimizers.py", ["--opt", "sf_adamw", "--steps", "4"],
                     ["checkpoint:blocks.*", "offload:blocks.*"])
    assert run.ledger_peak == run.allocator_peak
    assert _resident(run)["temporary"] == 8
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)


def test_doctor_on_shampoo():
    """torch-optimizer's Shampoo steps with `p.data.add_`: no_update was a false finding."""
    pytest.importorskip("torch_optimizer")
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(HERE / "train_optimizers.py",
                                          ["--opt", "shampoo", "--steps", "4"], 3)
    assert outcome.code == 0, outcome.reason
    assert report.findings == [], report.findings
