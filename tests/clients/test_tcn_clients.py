"""pytorch-tcn and entmax (tests/clients/train_tcn.py): temporal convolutional networks
(weight-normed, batch-normed and layer-normed blocks, causal and not, skip connections,
the README's streaming inference with buffers kept between calls) and sparse attention
(entmax's `entmax15`, `sparsemax` and `entmax_bisect` Functions, its own losses).

Measured (`tests/clients/harness.py run_client`, the helper hunt45c, 2026-12-06, torch
2.13.0 CPU, one intra-op thread: on two, the convolutions' kernel scratch moves the
allocator's peak 17,600 B above the ledger's at `--mode causal`, explained as workspace):
- `--mode causal --levels 3 --width 8` (weight_norm, dilation_reset, kaiming_uniform, skip
  connections; 2 steps, the first step's streaming evaluation between them): the ledger
  equal to the allocator, 503,880 B; `checkpoint:tcn.network.*` 278,252 B,
  `offload:tcn.network.0+checkpoint:tcn.network.[1-2]` 273,196 B, predicted and measured.
  With `--embed concat`: 648,860 B; `checkpoint:tcn.network.*` 330,744 B,
  `selective:tcn.network.*` 478,200 B, `offload:tcn.network.*` 220,088 B,
  `checkpoint:tcn.network.*.embedding_projection_2` 664,028 B,
  `checkpoint:cond+offload:tcn.network.0` 500,380 B both sides; `--embed add`: 545,636 B,
  `checkpoint:tcn.network.*` 294,688 B (the doctor warns, rightly, that pytorch-tcn's
  `embedding_projection_2`, made in both modes, gets no gradient in `add`). With `--bf16`
  (CPU autocast): 285,848 B (8,544 B scratch); `checkpoint:tcn.network.*` 199,380 B,
  `selective:tcn.network.*` 240,340 B, `offload:tcn.network.*` 142,740 B,
  `checkpoint:tcn.network.*.conv1` 277,816 B both sides, `trace --fake` equal.
  At full size (`--levels 4 --width 16`, two threads): 1,349,856 B both;
  `checkpoint:tcn.network.*` 583,524 B, `selective:tcn.network.*` 864,736 B,
  `offload:tcn.network.*` 451,296 B, `checkpoint:tcn` 1,344,276 B,
  `checkpoint:tcn.network.*.conv1` 1,245,920 B, `selective:tcn.network.*.conv2`
  1,480,416 B, `offload:tcn.network.*.conv1.padder` 1,349,856 B both sides.
- `--steps-by forward --steps 3` of the same: 475,984 B in the first forward (Note [A
  parametrized weight read is no forward], trace/steps.py: it read 31,252 B, stopped in
  the model's constructor).
- `--mode batch_norm --levels 3 --width 8` (non-causal, NLC): 906,956 B;
  `checkpoint:tcn.network.*` 562,176 B, `selective:tcn.network.*` 644,096 B,
  `offload:tcn.network.[0-1]+checkpoint:tcn.network.2` 535,680 B both sides.
  `--mode layer_norm` (gated): 594,504 B with 9,284 B of kernel scratch; 336,520 B,
  451,208 B and 310,024 B for the same three.
- `--mode entmax15`: 239,420 B (10,496 B of it the sort's scratch); `checkpoint:attn`
  244,608 B, `selective:attn` 245,120 B, `offload:attn` 239,420 B both sides;
  `--mode sparsemax` 198,460 B (8,448 B scratch), 203,648 B, 204,160 B, 198,460 B;
  `--mode bisect` (a learnt alpha): 198,676 B, 203,732 B, 204,244 B, 187,864 B;
  `--mode modules` (entmax's `Entmax15`/`Sparsemax` modules): 239,420 B,
  `checkpoint:attn.act` and `selective:attn.act` 260,480 B, `offload:attn.act` 239,420 B.
- `--mode tagger` (300 tags, `Entmax15Loss(ignore_index=0)`, its default `k=100` partial
  sort): 8,627,836 B with 511,056 B of kernel scratch; `checkpoint:attn` 8,550,972 B,
  `selective:attn` 8,625,212 B, `offload:attn` 8,513,148 B, `checkpoint:head` 8,567,356 B
  both sides. Its `trace --fake` reads 4,467,056 B under the real ledger: entmax's
  `if torch.any(unsolved)` (rows whose support fills the k largest, sorted again with 2k)
  asks the values of the logits, which a fake run has not; the stand-in False is named in
  `show` (docs/fake.md, "Values are stand-ins"), and the real run takes the second sort.
- The doctor is silent on every mode but `bisect`, where it warns, rightly, that `loss`
  keeps 4 B that `EntmaxBisectFunction` holds on ctx (`ctx.alpha`) past the step (Note
  [The function whose variable it is], doctor/source.py: it pointed at the TCN's
  `loss =` line, which that mode never runs).
"""

import contextlib
import importlib.util
import io

import pytest

from tests.clients.harness import HERE, ledger_pass, on_this_cpu, predicted_peak, \
    run_client

if importlib.util.find_spec("pytorch_tcn") is None or importlib.util.find_spec("entmax") is None:
    pytest.skip("pytorch-tcn or entmax is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]   # exact kernel scratch

SMALL = ["--levels", "3", "--width", "8"]


def test_a_weight_normed_tcn_with_streaming_evaluation_is_predicted_as_measured():
    """A causal TCN of three weight-normed blocks with skip connections, each conditioned
    on a learnt embedding (`embedding_shapes`, `embedding_mode='concat'`: the embedding,
    handed to every block by keyword, projected and concatenated to the block's first
    convolution's output), its streaming evaluation (`reset_buffers()`, then
    `inference(chunk)` four times: each `TemporalPad1d` keeps a view of its last input's
    tail as its `buffer`) between the two steps. Parameters: per block two (8, C, 3)
    convolutions as weight_g (8) and weight_v, their biases, the two 1x1 embedding
    projections (6 -> 8, 16 -> 8), a 1x1 downsample in the first (4 -> 8); the output
    projection 8 -> 4 and the (3, 6) embedding: 1,822 floats in 35 tensors, 7,288 B;
    Adam's state 2 x 7,288 B + 35 step counters (140 B)."""
    # the convolutions' kernel scratch at a policy's peak is the CPU's (and on AVX2 the
    # threads') choice (Note [Numbers that depend on the CPU], tests/clients/harness.py)
    pols = {"checkpoint:tcn.network.*": on_this_cpu(bf16=330_744, avx2=312_248),
            "offload:tcn.network.*": on_this_cpu(bf16=220_088),
            "checkpoint:cond+offload:tcn.network.0": 500_380}
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_tcn.py", ["--mode", "causal", "--embed", "concat", *SMALL],
                         list(pols))
    assert run.ledger_peak == run.allocator_peak == 648_860
    at = run.summary.at_peak
    assert (at["parameter"], at["gradient"], at["optimizer_state"]) == (7_288, 7_288, 14_716)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert peak is None or run.policies[policy].measured == peak


def test_a_parametrized_weight_read_in_the_constructor_begins_no_forward():
    """`TemporalBlock.__init__` initializes `self.conv1.weight` (weight_norm's
    parametrization, a module call at depth 0): each block built began a forward, and
    `--steps-by forward --steps 3` stopped in the constructor at 31,252 B with every policy
    refused (Note [A parametrized weight read is no forward], trace/steps.py). The three
    forwards now: the training step, two chunks of the streaming evaluation."""
    with contextlib.redirect_stdout(io.StringIO()):
        led = ledger_pass("train_tcn.py", ["--mode", "causal", *SMALL], steps=3,
                          steps_by="forward")
    s = led.summary()
    assert (s.steps_traced, s.peak.bytes, s.peak.step, s.peak.phase) == (3, 475_984, 1,
                                                                         "forward")
    assert predicted_peak(led, "checkpoint:tcn.network.*") == 244_964


def test_sparse_attention_under_entmax_losses_is_predicted_as_measured():
    """`entmax15` over the attention scores, trained with `Entmax15Loss`: both are custom
    autograd Functions that save their output (`Y`, `p_star`) themselves; the loss's
    Function calls `entmax15` again inside its forward (no graph there)."""
    pols = {"checkpoint:attn": 244_608, "selective:attn": 245_120, "offload:attn": 239_420}
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_tcn.py", ["--mode", "entmax15"], list(pols))
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 239_420
    assert run.ledger_peak == 228_924   # 10,496 B: the sort's kernel scratch
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    # entmax's own modules (`Entmax15`, `Sparsemax`) as `attn.act` and `attn.gate`: a
    # policy on the module whose whole forward is the Function; the re-run of `act` in
    # backward sorts again beside the loss's gradient
    pols = {"checkpoint:attn.act": 260_480, "checkpoint:attn.gate+offload:attn.act": 239_420}
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_tcn.py", ["--mode", "modules"], list(pols))
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 239_420
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_the_doctor_points_at_the_loss_line_of_the_function_that_ran():
    """`entmax_bisect` keeps its alpha on ctx (`ctx.alpha`, not save_for_backward), so the
    spent graph `loss` holds until the next step holds 4 B: a true warning. It pointed at
    line 114, the TCN modes' `loss =`, never run under `--mode bisect`; the line is now
    223, in `train_entmax` (Note [The function whose variable it is], doctor/source.py)."""
    from memledger.doctor.run import diagnose_in_process

    with contextlib.redirect_stdout(io.StringIO()):
        report, outcome = diagnose_in_process(HERE / "train_tcn.py", ["--mode", "bisect"], 2)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning")
    assert f.evidence["ctx_bytes_per_step"] == [4, 4]
    lines = (HERE / "train_tcn.py").read_text().splitlines()
    assert lines[f.where.line - 1].strip() == "loss = loss_fn(model(tokens), label)"
    assert f.where.line == 223
