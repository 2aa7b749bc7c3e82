"""performer-pytorch (tests/clients/train_performer.py): a causal `PerformerLM` (FAVOR+
attention over a random orthogonal projection kept in a buffer, rotary embeddings,
chunked feed-forward) trained through its `AutoregressiveWrapper` as the enwik8 example
trains it, Adam with clipping, `feature_redraw_interval=1` (the projection buffers drawn
again in place every other forward, a counter buffer bumped in between).

Measured (`tests/clients/harness.py run_client`, the helper hunt45b, 2026-12-06, torch
2.13.0 CPU; ledger = allocator everywhere, every policy predicted = measured):
- `--mode lm` (seq 32, 2 steps): 1,062,932 B; `checkpoint:net.performer.net.layers.*.*`
  740,756 B, `selective:...layers.*.*` 824,276 B, `offload:...layers.*.*` 535,284 B,
  `checkpoint:...layers.0.0+offload:...layers.1.*+selective:...layers.0.1` 740,756 B,
  `checkpoint:net.performer.net` 1,056,340 B. With `--mask --dropout 0.1`: 1,153,238 B;
  `selective:@SelfAttention` 902,306 B, `checkpoint:@SelfAttention` 844,450 B,
  `offload:@FastAttention` 741,590 B, `selective:@Chunk` 1,106,006 B.
- `--mode rev` (`reversible=True`, 2 steps): 845,268 B, the peak in the reversible
  backward's re-run of block 0's attention; every policy on the blocks (`checkpoint:
  ...blocks.*`, `...blocks.*.f`, `selective:...blocks.*.g.net`, `offload:...blocks.*.*`,
  `checkpoint:net.performer.net`) 845,268 B: the blocks run under no_grad in forward and
  save nothing a policy could act on (Note [A region called inside backward],
  measure/apply.py).
- `--mode gen --mask` (generalized ReLU kernel, a local attention head, GLU, token shift,
  ScaleNorm): 1,183,670 B; `checkpoint:...layers.*.*` 843,002 B, `selective:` 951,242 B,
  `offload:` 696,470 B, `selective:@LocalAttention` 1,179,046 B,
  `checkpoint:@FastAttention+offload:@FeedForward` 853,814 B.
- `--mode encdec --mask` (`PerformerEncDec`): 2,450,762 B + 60 B of kernel scratch =
  2,450,822 B allocator; `checkpoint:enc.performer.net.layers.*.*` 2,138,634 B,
  `selective:dec.net.performer.net.layers.*.*` 2,043,010 B, `offload:dec...` 1,666,586 B;
  `checkpoint:enc` and `checkpoint:dec.net.performer` refused alike (the redraw counter).
  With `--reversible --dim 16 --seq 16` (1 step): 452,964 B + 12 B = 452,976 B allocator;
  `selective:enc` refused alike for the counter.
- `--fake` ledgers of `lm` and `rev` agree with the real ones under four policies; the
  doctor finds nothing on `lm` and `gen`; on `rev` it warns (rightly) that `loss` keeps
  its graph past the step, and with it the 16 KiB the reversible Function keeps on ctx.
"""

import importlib.util

import pytest

from tests.clients.harness import ledger_pass, predicted_peak, run_client

if importlib.util.find_spec("performer_pytorch") is None:
    pytest.skip("performer-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

L = "net.performer.net.layers"


def test_a_redraw_in_the_rerun_and_a_plan_over_both_halves_of_each_layer():
    """`Performer.forward` bumps `calls_since_last_redraw` in place and, at the interval,
    redraws every attention's `projection_matrix`: `checkpoint:net.performer` is refused by
    predict and measure. Step 0's forward bumps the counter only; its re-run finds 1 and
    redraws. measure named the projection matrix, which that forward never wrote; both now
    name the counter (Note [The write the forward made, named], measure/apply.py). Under
    `selective:net.performer` the re-run's redraw is an op its forward did not run, and
    measure said so ("met aten.randn.default that its forward did not run") where predict
    named the counter; now both do (Note [Other ops after a write of state]).

    `SequentialSequence` keeps each layer as `ModuleList([attn, ff])` and calls the halves
    itself: plan took the attention halves alone as its blocks and at 550,000 B said "no
    candidate fits; the lowest predicted peak is 595,872 B"; the feed-forward halves are
    blocks too now (Note [Items called in parts], replay/plan.py), and its pick is
    measured as predicted."""
    from memledger.replay.plan import plan

    pick = f"offload:{L}.*.0+offload:{L}.1.1"
    run = run_client("train_performer.py", ["--mode", "lm", "--seq", "64"],
                     ["checkpoint:net.performer", "selective:net.performer", pick], steps=1)
    assert run.ledger_peak == run.allocator_peak == 1_535_904
    for kind in ("checkpoint", "selective"):
        p = run.policies[f"{kind}:net.performer"]
        assert p.predicted is None and p.measured is None, p
        assert p.predict_refusal == p.measure_refusal, p
        assert "writes net.performer.proj_updater.calls_since_last_redraw in place" \
            in p.measure_refusal
    rep = plan(run.ledger, 550_000)
    assert rep.blocks == [f"{L}.{i}.{k}" for k in (0, 1) for i in (0, 1)]
    assert rep.fits and rep.policy == pick, rep.policy
    assert rep.predicted_peak_bytes == run.policies[pick].predicted == \
        run.policies[pick].measured == 518_812


def test_reversible_layers_are_counted_to_the_byte():
    """`reversible=True`: `_ReversibleFunction` runs the blocks under no_grad and, in its
    backward, runs each block's `f` and `g` again under grad and backward through them.
    The ledger equals the allocator; the peak is in that backward, inside block 0's
    attention re-run; a policy on the blocks acts on no call and prices the baseline.

    The Function keeps the last block's output as `ctx.y` (2 x 32 x 64 floats), saved by
    nothing until its backward hands it to block 1's `g`: `show` listed it as saved for
    backward by `...blocks.1.g.net.norm`, which ran under no_grad in forward; now by the
    block that made it (Note [Held for backward, saved only in it], ledger/model.py).

    `ProjectionUpdater` (`net.performer.proj_updater`: buffers alone, a `forward` that
    raises, `redraw_projections` called by `Performer.forward`) keeps the blocks as
    `self.instance`. predict said a policy on it "matches no module" (Note [A module that
    holds buffers alone], replay/prepared.py), measure that it runs through another method,
    naming `...proj_updater.instance.blocks.0` around it (Note [Modules by the model's
    names], measure/apply.py); both now say the latter, with the model's names."""
    upd = "checkpoint:net.performer.proj_updater"
    run = run_client("train_performer.py", ["--mode", "rev"], [upd], steps=1)
    p = run.policies[upd]
    assert p.predicted is None and p.predict_refusal == p.measure_refusal, p
    assert "matches net.performer.proj_updater, never called as a module" in p.measure_refusal
    assert p.measure_refusal.endswith(   # Note [What an uncalled module's refusal advises]
        "no module inside it runs as a call, so none there can be selected: call the module "
        "itself (`self.proj_updater(x)`) or select the module around it that runs as one, "
        "net.performer (a policy there holds its work and more)"), p
    assert run.ledger_peak == run.allocator_peak == 610_144
    pk = run.summary.peak
    assert (pk.phase, pk.op, pk.module) == (
        "backward", "mul.Tensor", "net.performer.net.blocks.0.f.net.fn.fast_attention")
    act = run.summary.activations
    assert act.by_module == {"(AutoregressiveWrapper.forward)": 16_900,
                             "net.performer.net.blocks.1": 2 * 32 * 64 * 4,
                             "net.norm": 8_704, "net.to_out": 8_192}
    assert act.saved_bytes == 50_180
    assert predicted_peak(run.ledger, "offload:net.performer.net.blocks.*.f.net") == 610_144


def test_a_state_write_is_met_before_a_second_pass_through_the_encoder():
    """`PerformerEncDec` with reversible layers: each decoder cross-attention layer's
    reversible backward goes through the encoder's graph again (`retain_graph=True`), and
    the encoder's `Performer.forward` bumps its redraw counter. `selective:enc` read "a
    second backward pass through it" in predict; measure's first re-run of `enc` finds the
    counter moved and is refused for it (the same line as below, `run_client`, 1 step).
    predict now says the state's line where both hold (Note [A state write before the
    second pass], replay/engine.py). The ledger pass alone, for time."""
    from memledger.errors import PolicyError
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    led = ledger_pass("train_performer.py", ["--mode", "encdec", "--reversible", "--dim", "16",
                                             "--seq", "16", "--depth", "2"], steps=1)
    with pytest.raises(PolicyError) as e:
        predict(led, [parse_policy("selective:enc")], bandwidth=1e9)
    assert str(e.value) == (
        "memledger: selective:enc would re-run enc, whose forward writes "
        "enc.performer.proj_updater.calls_since_last_redraw in place, so the re-run would "
        "start from what the forward left and compute other values (other gradients, or a "
        "metric that counts the batch twice); offload that module instead, or keep that "
        "write out of the region")
