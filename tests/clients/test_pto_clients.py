"""pytorch_optimizer (kozistr's collection, 4.1.0; tests/clients/train_pto.py): a tiny pre-LN
transformer classifier (19,332 fp32 parameters in 29 tensors, 77,328 B) trained by
optimizers whose state is out of the ordinary. Each optimizer-state figure below is the
optimizer's own formula from its state shapes.

Measured once (`tests/clients/harness.py run_client`, the helper hunt39b, 2026-12-06), 2
steps, batch 8 x 16 tokens; ledger = allocator, and `checkpoint:blocks.*`,
`offload:blocks.*`, `selective:blocks.*` and `checkpoint:blocks.0+offload:blocks.1`
predicted = measured to the byte for every optimizer:

    --opt       state (B)   peak (B)    ckpt:blocks.*  offload:blocks.*  selective:blocks.*
    soap          564,384   1,103,500     942,028        870,092          1,060,364
    shampoo       814,864   1,353,980   1,192,508      1,120,572          1,310,844
    muon           89,120     628,236     466,764        394,828            585,100
    adopt         154,656     693,772     532,300        466,100            650,636
    lookahead     232,100     771,216     609,744        537,808            728,080
    create        231,984     771,100     609,628        537,692            727,964
    sf_adamw      154,656     693,772     532,300        466,100            650,636
    ranger21      386,640     925,756     764,284        698,208            882,620

At batch 1 x 4 tokens the peak moves into the optimizer step: Shampoo 1,117,440 B (ledger =
allocator), SOAP 937,360 B in the ledger + 33,156 B of LAPACK scratch (eigh, QR) = the
allocator's 970,516 B, Muon 301,204 + 22,144 B of bf16 `bmm` scratch (Newton-Schulz) =
323,348 B; every policy predicted = measured there too.

Found: the doctor warned `no_update` on SOAP's and ADOPT's first step, which builds the
state and moves nothing by design (Note [A step that builds state], trace/doctor_probe.py);
Lookahead's `backup_and_load_cache()` copies (77,328 B) read as `input`, not optimizer
state (Note [State made between steps], trace/collector.py); a step's batch made after the
evaluation read as `activation` (Note [A batch made after an evaluation]); AdaShift's
deque of gradients and DASH's per-block lists of matrices were missed by the state walk
(`--opt create:adashift`, `create:dash`; tests/unit/test_optimizer_state_walk.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io

import pytest

from tests.clients.harness import HERE, ledger_pass, run_client

if importlib.util.find_spec("pytorch_optimizer") is None:
    pytest.skip("pytorch_optimizer is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

P = 19_332            # parameters, elements
PARAMS = 4 * P        # 77,328 B: one fp32 tensor shaped as each parameter
N_TENSORS = 29
# the 2-D parameters' shapes: embed, per block (attn in_proj, out_proj, mlp.0, mlp.2), head
MATRICES = [(64, 32)] + 2 * [(96, 32), (32, 32), (64, 32), (32, 64)] + [(4, 32)]
# every parameter's shape, 1-D ones too: embed; per block ln1 (w, b), in_proj (w, b),
# out_proj (w, b), ln2 (w, b), mlp.0 (w, b), mlp.2 (w, b); norm (w, b); head (w, b)
BLOCK = [(32,), (32,), (96, 32), (96,), (32, 32), (32,), (32,), (32,), (64, 32), (64,),
         (32, 64), (32,)]
SHAPES = [(64, 32)] + 2 * BLOCK + [(32,), (32,), (4, 32), (4,)]
# Muon: the blocks' matrices take the orthogonalized momentum, the rest AdamW
MUON_ELEMENTS = 2 * (96 * 32 + 32 * 32 + 64 * 32 + 32 * 64)


def _square_sum(dims) -> int:
    return sum(d * d for d in dims)


def test_shapes_add_up():
    assert sum(a * b for a, b in MATRICES) + 2 * (96 + 32 + 4 * 32 + 64 + 32) + 64 + 4 \
        == P
    assert len(SHAPES) == N_TENSORS
    assert sum(int(__import__("math").prod(s)) for s in SHAPES) == P


def test_soap_preconditioners_are_optimizer_state_and_policies_are_exact():
    """SOAP: exp_avg and exp_avg_sq (2 x 77,328 B) and, for every matrix, a (d, d)
    statistics matrix `GG[i]` and eigenbasis `Q[i]` per dimension, kept in lists in the
    state (1-D parameters get empty lists: precondition_1d is off). Its first step builds
    them all and moves nothing."""
    run = run_client("train_pto.py", ["--opt", "soap"],
                     ["checkpoint:blocks.0+offload:blocks.1"], steps=2)
    assert run.ledger_peak == run.allocator_peak == 1_103_500
    state = 2 * PARAMS + 4 * 2 * sum(_square_sum(m) for m in MATRICES)
    assert state == 564_384
    assert run.summary.resident["optimizer_state"] == state
    # at the peak (step 2's backward): x_val, and step 2's x (8 x 16 int64) and y (8), made
    # after step 1's evaluation: `activation` before (Note [A batch made after an
    # evaluation], trace/collector.py), the at-peak input 1,024 B
    assert run.summary.at_peak["input"] == 1024 + 1024 + 64
    mix = run.policies["checkpoint:blocks.0+offload:blocks.1"]
    assert (mix.predicted, mix.measured) == (942_028, 942_028)


@pytest.mark.parametrize("opt,state", [
    # momentum buffer + pre_cond_i and inv_pre_cond_i (d x d) per dimension of every
    # parameter, 1-D ones included
    ("shampoo", PARAMS + 4 * 2 * sum(_square_sum(s) for s in SHAPES)),
    # momentum for the blocks' matrices; exp_avg + exp_avg_sq (AdamW) for the rest
    ("muon", 4 * MUON_ELEMENTS + 2 * 4 * (P - MUON_ELEMENTS)),
])
def test_state_bytes_are_the_optimizers_formula(opt, state):
    led = ledger_pass("train_pto.py", ["--opt", opt], steps=1)
    assert led.summary().resident["optimizer_state"] == state
    assert state == {"shampoo": 814_864, "muon": 89_120}[opt]


def test_lookahead_copies_made_between_steps_are_optimizer_state():
    """Lookahead(SGD(momentum), pullback): the slow weights and slow momenta (made at
    construction) and SGD's momentum buffers, 3 x 77,328 B. The script evaluates on the
    slow weights after each step: `backup_and_load_cache()` puts a copy of every parameter
    in `state[p]['backup_params']`, `clear_and_load_backup()` copies it back and deletes
    it, both between two steps, where no step hook reads the state. Those 77,328 B read as
    `input` (the batch), filed so by the `copy_` after the evaluation's forward (Note
    [State made between steps], trace/collector.py)."""
    with contextlib.redirect_stdout(io.StringIO()):
        led = ledger_pass("train_pto.py", ["--opt", "lookahead_sgd", "--eval-slow"], steps=2)
    st = led.storages
    backup = st[st["name"].str.endswith(".backup_params")]
    assert len(backup) == N_TENSORS and int(backup["bytes"].sum()) == PARAMS
    assert set(backup["category"]) == {"optimizer_state"}
    # x_val, and each step's x (8 x 16 int64) and y (8): step 2's, made after the
    # evaluation's forward, read as `activation` (Note [A batch made after an evaluation],
    # trace/collector.py)
    inputs = st[st["category"] == "input"]
    assert sorted(inputs["bytes"].tolist()) == [64, 64, 1024, 1024, 1024]
    assert led.summary().resident["optimizer_state"] == 3 * PARAMS


def test_doctor_is_silent_on_a_first_step_that_builds_state():
    """ADOPT's first step only puts the squared gradient in exp_avg_sq (its update divides
    by the previous step's second moment); the doctor warned "optimizer.step() changed no
    trainable parameter in step 1 although 29 had gradients (learning rate 0? a wrapper
    that skips the step?)" (Note [A step that builds state], trace/doctor_probe.py)."""
    from memledger.doctor.run import diagnose_in_process

    with contextlib.redirect_stdout(io.StringIO()):
        report, outcome = diagnose_in_process(HERE / "train_pto.py",
                                              ["--opt", "adopt", "--steps", "3"], 3)
    assert outcome.code == 0, outcome.reason
    assert report.findings == [], report.findings
