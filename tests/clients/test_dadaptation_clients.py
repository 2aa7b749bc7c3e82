"""D-Adaptation (tests/clients/train_dadaptation.py): the learning-rate-free DAdaptAdam,
DAdaptSGD, DAdaptAdaGrad, DAdaptAdan and DAdaptLion (`lr=1.0`, the step size D estimated
from the gradients with `.item()` reads between two passes over the parameters) on a tiny
token classifier, with parameter groups (`layer_scale`, a group at `lr=0.0`), coupled and
decoupled weight decay, a sparse embedding gradient under DAdaptAdaGrad.

Measured (`tests/clients/harness.py run_client`, the helper hunt53a, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; ledger = allocator, every policy predicted
= measured), 2 steps: `--opt adam --groups --decay 0.01` 242,168 B (`checkpoint:blocks.*`
239,416, `offload:@Block` 230,520, `selective:blocks.0` 243,512 B); `--opt sgd --decay
0.01`, `--opt adagrad --momentum 0.5` 242,168 B; `--opt adagrad --sparse` 282,740 B + 12 B
of kernel scratch; `--opt adan --groups` 348,824 B; `--opt lion --clip 1.0` 199,400 B;
`--depth 3` runs with globs, mixes and `offload:embed` as measured. The doctor is silent on
every optimizer.
"""

import importlib.util
import json
import tempfile
from pathlib import Path

import pytest

from tests.clients.harness import HERE, _call, assert_one_doctor_error, run_client

if importlib.util.find_spec("dadaptation") is None:
    pytest.skip("dadaptation is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

PARAMS = (64 * 32 + 2 * (2 * 32 + 32 * 64 + 64 + 64 * 32 + 32) + 32 * 4 + 4) * 4


def test_dadapt_adam_keeps_three_tensors_a_parameter_and_is_predicted_as_measured():
    """DAdaptAdam with two parameter groups (the head's at `layer_scale=0.5`) and coupled
    weight decay (added into `p.grad` in place): its state is `s`, `exp_avg` and
    `exp_avg_sq` for every parameter, three times the parameters' bytes, the integer step
    no tensor; three policies predicted and measured to the byte; the doctor is silent."""
    argv = ["--opt", "adam", "--groups", "--decay", "0.01"]
    pols = {"checkpoint:blocks.*": 239_416, "offload:@Block": 230_520,
            "selective:blocks.0": 243_512}
    run = run_client("train_dadaptation.py", argv, list(pols), steps=2)
    assert run.ledger_peak == run.allocator_peak == 242_168
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    at = run.ledger.at_peak()
    assert (at["parameter"], at["optimizer_state"]) == (PARAMS, 3 * PARAMS) == \
        (42_768, 128_304)
    assert_one_doctor_error("train_dadaptation.py", argv, 2, None, "")


def test_dadapt_sgd_faked_stops_in_one_line_at_its_division_by_the_stand_in():
    """DAdaptSGD's first step divides by `g0_norm`, the square root of `.item()` sums that a
    `--fake` run answers with its stand-in 0.0: the run ended in the library's
    ZeroDivisionError, its traceback and exit 3 as the script's failure. Now exit 2, and one
    line naming the script's line, the library's division and the stand-in (Note
    [Arithmetic on a stand-in], trace/fake_arithmetic.py)."""
    from memledger.trace import worker as trace_worker

    with tempfile.TemporaryDirectory(prefix="memledger-dadapt-") as tmp:
        status = Path(tmp) / "status.json"
        code = _call(trace_worker.main, ["ledger", "--fake", "--device", "cpu", "--out",
                                         str(Path(tmp) / "x.ledger"), "--status", str(status),
                                         "--steps", "1", str(HERE / "train_dadaptation.py"),
                                         "--", "--opt", "sgd"])
        reason = json.loads(status.read_text())["reason"]
    assert (code, reason) == (2, (
        "memledger: cannot run fake at tests/clients/train_dadaptation.py:111 `opt.step()`: "
        "`dadaptation` (called by the script) at dadaptation/dadapt_sgd.py:124 `dlr = "
        "d*lr/g0_norm`: divides by zero after the stand-in 0.0 a --fake run gives `.item()` "
        "(aten._local_scalar_dense) at dadaptation/dadapt_sgd.py:111 `g_sq += (grad * "
        "grad).sum().item()` (a fake tensor has no values; a real run reads them there); "
        "trace it for real (docs/fake.md, Values)"))
