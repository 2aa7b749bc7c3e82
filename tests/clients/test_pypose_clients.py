"""PyPose (tests/clients/train_pypose.py): LieTensor parameters (`pp.Parameter(pp.
randn_SE3())`, a Tensor subclass carrying its `ltype`) trained by Adam through `Exp`,
`Log`, `Act` and `Inv`; a pose graph optimized by `pp.optim.LM` (its own Jacobians, no
backward) under a `StopOnPlateau` scheduler; an IMU corrector in front of
`pp.module.IMUPreintegrator`; a learned system filtered by `pp.module.EKF`.

Measured (`tests/clients/harness.py run_client`, the helper hunt52a, 2026-12-07, torch
2.13.0 CPU, pypose 0.9.5, AMD EPYC (AVX2), one intra-op thread; ledger = allocator with
its kernel scratch, every policy predicted = measured):
- `--mode net` (2 steps): 110,584 B; `checkpoint:blocks.*` 100,728, `selective:@PoseBlock`
  117,112, `offload:blocks.*` 58,408, `checkpoint:blocks.0+offload:blocks.1` 88,040,
  `checkpoint:blocks.*.mlp` 87,928. `--twist` 110,792 B; `--opt sgd --accum 2 --validate
  --depth 3` 146,952 B (3 policies each, exact).
- `--mode pgo` (2 steps): 166,608 B (the Jacobian's rows, 78 x 13 x 7 floats each, at the
  vmapped backward inside `LM.step`); `offload:*` 166,244. `--gn`, `--kernel huber`,
  `--solver lstsq --strategy adaptive` alike. `checkpoint:*` fails in measure (the
  LieTensor loses its class in the re-run under `functional_call`; the script's own
  checkpoint fails the same way) and `compare` rejects it for that.
- `--mode imu` (2 steps): 31,908 B; `checkpoint:imu` 41,076, `offload:net` 25,828,
  `checkpoint:net+offload:imu` 23,828 (the harness once read 40 B over: Note [Tensors made
  at import], tests/clients/harness.py).
- `--mode ekf --frames 6 --dim 64` (2 steps): 15,536 B; `checkpoint:model.g` 51,428
  (76,708 predicted before Note [A graph dropped unseen]), `checkpoint:model.*` 85,028.
`trace --fake` refuses every mode at the first LieTensor (docs/fake.md, Known limitations).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("pypose") is None:
    pytest.skip("pypose is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_an_ekf_is_predicted_as_measured_and_a_pose_graph_under_lm_trains_cleanly():
    """The EKF calls its observation model `g` three times a filter step: the
    linearization's reference point (kept on the model, never differentiated), inside
    `jacobian`, and for the innovation. `checkpoint:model.g` was predicted 48,476 B
    against 33,308 measured: each reference call's frame and RNG state held to the loss's
    backward (Note [A graph dropped unseen], replay/engine.py). The pose graph's LM steps
    write the nodes with no gradient: the doctor once said "no_gradient ... nothing
    trained" (Note [A step that finds its own direction], doctor/updates.py)."""
    argv = ["--mode", "ekf", "--frames", "4", "--dim", "32"]
    pols = {"checkpoint:model.g": 33_308, "offload:model.f": 7_240,
            "selective:model.f+offload:model.g": 33_648}
    run = run_client("train_pypose.py", argv, list(pols), steps=1)
    assert run.ledger_peak == 7_376
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=7_388)   # + 12 B of kernel scratch
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
    assert_one_doctor_error("train_pypose.py", ["--mode", "pgo", "--nodes", "4"], 2, None, "")
