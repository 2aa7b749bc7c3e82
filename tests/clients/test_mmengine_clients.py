"""mmengine (tests/clients/train_mmengine.py): a `BaseModel` built from a config dict
(`blocks.N` of self-attention + MLP), trained by `Runner` and by an `OptimWrapper` driven by
hand, with `accumulative_counts=2` (the wrapper divides each micro-batch's loss by 2 and
runs `step()` / `zero_grad()` every second `update_params`), `clip_grad`, a LinearLR
scheduler, and bf16 autocast.

Measured (`tests/clients/harness.py run_client`, one intra-op thread, the helper hunt41f,
2026-12-06), one optimizer step = two micro-batches of 2 sequences:
`--mode runner --clip` reads the ledger equal to the allocator, 355,200 B (peak in the
second micro-batch's forward: 70,032 B of accumulated gradients beside its activations);
`checkpoint:blocks.*` 312,732 B and `selective:blocks.*` 351,196 B predicted and measured.
`--mode loop --amp --seq 48` (bf16 autocast, the wrapper by hand): ledger 427,852 B plus
3,072 B of bf16 matmul scratch = allocator 430,924 B; `offload:blocks.*` 320,412 B and
`checkpoint:blocks.0+offload:blocks.1` 320,724 B both sides. The doctor finds nothing on
the Runner with a remainder micro-batch (3 iterations, `accumulative_counts=2`: the last
loss divided by 1) nor on the hand loop. Runner start-up after the imports: ~0.5 s of CPU
per pass; the file costs ~2 s of CPU beyond its collection. Skipped without mmengine.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io

import pytest

if importlib.util.find_spec("mmengine") is None:
    pytest.skip("mmengine is not installed", allow_module_level=True)

from tests.clients.harness import HERE, assert_pinned, run_client  # noqa: E402

pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]


def _backward_passes(run) -> int:
    ph = run.ledger.phases
    return int(((ph["phase"] == "backward") & (ph["phase"].shift() != "backward")).sum())


def test_runner_accumulation_is_one_step_of_two_micro_batches():
    """The Runner's `OptimWrapper(accumulative_counts=2, clip_grad=...)`: the first
    `update_params` runs backward alone (no step, no zero_grad), the second backward adds
    into the same `.grad` storages, then clip, AdamW, zero_grad. One optimizer step traced
    holds both micro-batches; at the peak (the second forward) the gradients are one copy
    of the parameters, 70,032 B, and no optimizer state exists yet."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run = run_client("train_mmengine.py", ["--mode", "runner", "--clip"],
                         ["checkpoint:blocks.*", "selective:blocks.*"], steps=1)
    assert run.summary.steps_traced == 1
    assert _backward_passes(run) == 2
    assert run.ledger_peak == run.allocator_peak == 355_200
    assert run.summary.peak.phase == "forward"
    assert {k: v for k, v in run.summary.at_peak.items() if v} == {
        "parameter": 70_032, "gradient": 70_032, "activation": 167_440,
        "temporary": 39_936, "input": 1_552, "other": 6_208}
    ckpt, sel = run.policies["checkpoint:blocks.*"], run.policies["selective:blocks.*"]
    assert (ckpt.predicted, ckpt.measured) == (312_732, 312_732)
    assert (sel.predicted, sel.measured) == (351_196, 351_196)


def test_hand_driven_optim_wrapper_under_bf16_autocast():
    """`optim_context` + mmengine's `autocast(device_type='cpu', dtype=torch.bfloat16)` +
    `update_params(loss)` in a plain loop. The bf16 weight copies autocast makes are saved
    for backward (activations), the fp32 master weights stay parameters. The bf16 matmuls
    take 3,072 B of kernel scratch where the CPU has native bf16, none on AVX2 (Note
    [Numbers that depend on the CPU], tests/clients/harness.py)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run = run_client("train_mmengine.py", ["--mode", "loop", "--amp", "--seq", "48"],
                         ["offload:blocks.*", "checkpoint:blocks.0+offload:blocks.1"], steps=1)
    assert run.summary.steps_traced == 1
    assert _backward_passes(run) == 2
    assert run.ledger_peak == 427_852
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, bf16=430_924, avx2=427_852, amd_bf16=443_212)
    at = {k: v for k, v in run.summary.at_peak.items() if v}
    assert_pinned(at.pop("workspace", 0), bf16=3_072, avx2=0)
    assert at == {"parameter": 70_032, "gradient": 70_032, "activation": 221_712,
                  "temporary": 50_636, "input": 3_088, "other": 12_352}
    off, mix = run.policies["offload:blocks.*"], \
        run.policies["checkpoint:blocks.0+offload:blocks.1"]
    assert (off.predicted, off.measured) == (320_412, 320_412)
    assert mix.predicted == mix.measured
    assert_pinned(mix.measured, bf16=320_724, avx2=320_724, amd_bf16=333_972)


@pytest.mark.parametrize("argv", [
    ["--mode", "runner", "--samples", "6"],   # 3 iterations: the last loss divided by 1
    ["--mode", "loop", "--accum", "2"],
])
def test_doctor_finds_nothing_on_mmengine_accumulation(argv):
    """`update_params` backward-s `loss / accumulative_counts` (or the remainder's count on
    the last iterations): no `loss_not_divided`, no `zeroed_before_step`."""
    from memledger.doctor.run import diagnose_in_process

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        report, outcome = diagnose_in_process(HERE / "train_mmengine.py", argv, 2)
    assert outcome.code == 0, outcome.reason
    assert [f.line() for f in report.findings] == []
