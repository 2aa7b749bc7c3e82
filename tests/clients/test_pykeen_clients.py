"""pykeen (tests/clients/train_pykeen.py): knowledge-graph embeddings trained with pykeen's
own pieces, a TriplesFactory of random labeled triples, ConvE with `LCWATrainingLoop`, HolE
with `SLCWATrainingLoop`, and RotatE (complex embeddings) by hand with `score_hrt` and the
`BasicNegativeSampler`.

Measured once (`tests/clients/harness.py run_client`, the helper hunt40a, 2026-12-06, torch
2.13.0 CPU, pykeen 1.11.1): `--mode conve` (1 step) reads the ledger equal to the
allocator, 240,880 B; `checkpoint:interaction.hr2d` 219,016 B, `offload:interaction.hr1d`
227,312 B and `selective:interaction.hr2d+offload:interaction.hr1d` 214,664 B predicted and
measured. `--mode rotate` (2 steps): 148,048 B; `checkpoint:interaction` 174,480 B and
`offload:interaction` 135,696 B both sides. `--mode ermlpe` (`SLCWATrainingLoop`, 2 steps):
205,304 B; `checkpoint:interaction` 198,096 B, `offload:interaction` 167,360 B,
`selective:interaction` 204,240 B, exact. `--mode hole` (HolE, SLCWA, 2 steps): 70,224 B;
`offload:interaction` 56,400 B and `checkpoint:interaction` 80,848 B both sides. pykeen's loop runs a size probe (forward and
backward on two batches, no step) before training, even with a batch size given on CPU:
`doctor` warns `dropped_update` on it, 2 of 4 backward passes (true: pass
`automatic_memory_optimization=False` to the loop to skip the probe).
"""

import contextlib
import importlib.util
import io
import warnings

import pytest

from tests.clients.harness import run_client

if importlib.util.find_spec("pykeen") is None:
    pytest.skip("pykeen is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


@pytest.fixture(scope="module", autouse=True)
def _pykeen_imported():
    """pykeen's import makes 76 B of tensors; imported by the first pass alone, they read as
    ledger over allocator in this process (a fresh process per pass sees them in both)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pykeen.models  # noqa: F401
        import pykeen.sampling  # noqa: F401
        import pykeen.training  # noqa: F401
        import pykeen.triples  # noqa: F401


def _run(mode: str, policies: list[str], steps: int):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        return run_client("train_pykeen.py", ["--mode", mode], policies, steps=steps)


def test_rotate_conjugate_views_are_counted_once_and_offloaded_as_saved():
    """RotatE scores `t * torch.conj(r)` (complex, 16 x 4 x 32 x 8 B = 16,384 B each).

    - The conjugate fallback clones `conj(r)` before `mul` (an event of the ledger, freed
      after the op), and the profiler lists that clone inside `mul`'s call: its copy read
      as `mul`'s scratch as well, so the ledger with its scratch came to 164,432 B against
      the allocator's 148,048 B, and `checkpoint:interaction` predicted 190,864 B against
      174,480 B measured (Note [Inputs a fallback copies before the op], trace/allocator.py).
    - Offload rebuilt the saved `conj(r)` without its conjugate bit: the gradient of `t`
      was wrong, and the backward cloned the view it now met, 16,384 B more: measured
      152,080 B where 135,696 B is predicted (Note [A conjugate view read back],
      measure/offload.py)."""
    run = _run("rotate", ["checkpoint:interaction", "offload:interaction"], steps=2)
    assert run.ledger_peak == run.allocator_peak == 148_048
    assert run.ledger.peak_with_scratch() == 148_048
    ckpt, off = run.policies["checkpoint:interaction"], run.policies["offload:interaction"]
    assert (ckpt.predicted, ckpt.measured) == (174_480, 174_480)
    assert (off.predicted, off.measured) == (135_696, 135_696)


def test_conve_blocks_under_pykeens_own_loop_are_predicted_as_measured():
    """ConvE's interaction: `hr2d` (BatchNorm2d, Dropout, Conv2d, BatchNorm2d, ReLU,
    Dropout2d) and `hr1d` (Linear, Dropout, BatchNorm1d, ReLU), trained by
    `LCWATrainingLoop.train` (1-N scores against the 40 entities, inverse triples)."""
    pols = ["checkpoint:interaction.hr2d", "offload:interaction.hr1d",
            "selective:interaction.hr2d+offload:interaction.hr1d"]
    run = _run("conve", pols, steps=1)
    assert run.ledger_peak == run.allocator_peak == 240_880
    assert run.ledger.peak_with_scratch() == 240_880
    got = {p: (r.predicted, r.measured) for p, r in run.policies.items()}
    assert got == {"checkpoint:interaction.hr2d": (219_016, 219_016),
                   "offload:interaction.hr1d": (227_312, 227_312),
                   "selective:interaction.hr2d+offload:interaction.hr1d": (214_664, 214_664)}


def test_the_doctor_counts_the_size_probes_dropped_gradients_and_nothing_else():
    """`LCWATrainingLoop.train` with a batch size, on CPU, still probes it first: forward
    and backward on 2 batches, no step, `zero_grad()` (set to None), then
    `reset_parameters_()` re-initializes the weights in place and `model.to(device)` runs.
    The doctor warned "1 of 4 backward passes" dropped: the re-initialization read as
    SAM's ascent (weights moved after a backward, gradients read), the read being
    `Module._apply` fetching each `param.grad`, None, to move it along (Note [Moved
    without reading the gradient], trace/doctor_probe.py). RotatE's hand loop: nothing."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    found = {}
    for mode in ("conve", "rotate"):
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            report, outcome = diagnose_in_process(HERE / "train_pykeen.py", ["--mode", mode], 2)
        assert outcome.code == 0, outcome.reason
        found[mode] = report.findings
    assert found["rotate"] == []
    [f] = found["conve"]
    assert (f.check, f.severity) == ("dropped_update", "warning")
    assert f.evidence == {"backward_passes": 4, "dropped": 2, "dropped_nonfinite": 0,
                          "optimizer_steps": 2, "updates": 2}


def test_hole_offload_is_measured_as_predicted_after_the_embeddings_are_reinitialized():
    """HolE under `SLCWATrainingLoop`: `train()` gives the entity embeddings a new storage
    (`weight.data = ...`) after the policy went on. The offloader skipped the old address,
    reused by an embedding lookup, which stayed on the device: measured 56,476 to 58,652 B
    from one fresh process to the next (Note [A parameter given a new storage],
    measure/offload.py). And `new_zeros` of a conjugate view in the backward lists the
    fallback's clone before its own `new_empty` (Note [Inputs a fallback copies before
    the op])."""
    run = _run("hole", ["offload:interaction"], steps=2)
    assert run.ledger_peak == run.allocator_peak == run.ledger.peak_with_scratch() == 70_224
    off = run.policies["offload:interaction"]
    assert (off.predicted, off.measured) == (56_400, 56_400)
