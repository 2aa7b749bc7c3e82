"""pytorch-forecasting (tests/clients/train_pf.py): TemporalFusionTransformer, N-BEATS and
DeepAR built by `from_dataset` from a small synthetic `TimeSeriesDataSet`, trained by
Lightning's `Trainer.fit` or by a loop of the script's own.

Measured (`tests/clients/harness.py run_client`, the helper hunt44b, 2026-12-06,
pytorch-forecasting 1.8.0, lightning 2.6.6, torch 2.13.0 CPU; 2 steps, 3 series of 40,
batch 8):
- `--model tft --loop trainer`: the ledger equal to the allocator, 934,728 B;
  `checkpoint:lstm_encoder` 810,536 B, `offload:lstm_encoder` 805,480 B,
  `checkpoint:multihead_attn` 916,224 B, `selective:multihead_attn` 936,704 B,
  `offload:multihead_attn` 910,656 B, `checkpoint:encoder_variable_selection` 760,252 B,
  `checkpoint:pos_wise_ff+offload:static_enrichment` 868,872 B,
  `selective:@GatedResidualNetwork` 885,736 B, `checkpoint:@GatedResidualNetwork`
  750,312 B, each predicted and measured.
- `--model tft --loop hand`: 941,324 B; the same policies exact (6,596 B above the
  trainer's each), `checkpoint:encoder_variable_selection` 766,848 B once the variable
  selection weights the loop keeps in `out` were read as the caller's (Note [What a call
  hands back], replay/engine.py): predicted 949,452 B before.
- `--model nbeats --collect`: hand 52,220 B,
  trainer 51,496 B (12 B of kernel scratch under the allocator); `checkpoint`,
  `selective`, `offload` of `net_blocks.*` and `checkpoint:net_blocks.0+offload:
  net_blocks.1` exact, `offload:net_blocks.*` by hand once the read-back copy a never
  unpacked save holds was counted (Note [A save backward never reads], replay/engine.py):
  1,024 B under measured before.
- Without `--collect` the torchmetrics metrics building the model drops in reference cycles
  are freed at the garbage collector's moment, which differs from pass to pass (the
  doctor warns, `cyclic_garbage`, 24 to 48 B a metric): ledger and policies 120 to 904 B
  apart on N-BEATS and DeepAR. DeepAR with `--collect`: 512 B gaps, the collector's moment too (a
  torch.distributions `AffineTransform <-> _InverseTransform` cycle holding each step's
  prediction; helper gap44, docs/decisions.md "DeepAR's 512 bytes"); exact with the
  collector held off in every pass: hand 390,188 B, with scratch = allocator 413,412 B,
  `checkpoint:rnn` 341,688 B, `offload:rnn` 239,864 B.
"""

import contextlib
import importlib.util
import io
import warnings

import pytest

if importlib.util.find_spec("pytorch_forecasting") is None:
    pytest.skip("pytorch-forecasting is not installed", allow_module_level=True)

from tests.clients.harness import run_client  # noqa: E402

pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]

SMALL = ["--series", "2", "--length", "24", "--batch", "4"]


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """Imported before the first pass: torchmetrics makes a 4 B tensor at import
    (tests/clients/test_lightning.py), which the ledger pass alone would see."""
    import pytorch_forecasting  # noqa: F401


def test_tft_variable_selection_weights_the_loop_keeps_are_the_callers():
    """A loop by hand keeps the model's output (`out = model(x)`) to the next step's
    forward, and with it each variable selection network's softmax weights, which the
    network hands back and no forward op reads again. Read as kept by a line inside the
    region (Rule 10), the re-run's copy and its graph's saves were held to the next
    forward: `checkpoint:encoder_variable_selection` was predicted above the baseline
    (949,452 B against 941,324 B on 3 series of 40, batch 8), 182,604 B over measured."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        run = run_client("train_pf.py", ["--model", "tft", "--loop", "hand", *SMALL],
                         ["checkpoint:encoder_variable_selection"], steps=2)
    assert run.ledger_peak == run.allocator_peak == 616_908
    ret = [r for r in run.ledger.extra["ret"] if r["mod"] == "encoder_variable_selection"]
    assert len(ret) == 2 and all(len(r["sids"]) == 2 for r in ret)   # (outputs, weights)
    p = run.policies["checkpoint:encoder_variable_selection"]
    assert (p.predicted, p.measured) == (532_096, 532_096)


def test_nbeats_offload_holds_a_read_back_copy_for_the_backcast_node():
    """N-BEATS' seasonality block runs `theta_f_fc` twice on one ReLU output (backcast and
    forecast); with no backcast loss backward never unpacks the backcast's save, and the
    loop's `out` keeps that node to the next forward. measure's offloader holds the
    read-back copy until every save is unpacked, so to then: `offload:net_blocks.*` was
    predicted 49,416 B against 50,440 B measured, one 8 x 32 fp32 ReLU output under (Note
    [A save backward never reads], replay/engine.py). `--collect`: building the model
    drops torchmetrics metrics in reference cycles, freed at the collector's moment (the
    doctor's cyclic_garbage); collected at once, every pass sees the same bytes."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        run = run_client("train_pf.py", ["--model", "nbeats", "--loop", "hand", "--collect"],
                         ["offload:net_blocks.*"], steps=2)
    assert run.ledger_peak == run.allocator_peak == 52_220
    p = run.policies["offload:net_blocks.*"]
    assert (p.predicted, p.measured) == (50_440, 50_440)


@pytest.fixture
def collector_held_off(monkeypatch):
    """Python's cyclic garbage collector off for every pass of the test (the passes turn it
    on as a script starts: Note [Objects from before the script], trace/script.py);
    explicit `gc.collect()` calls still run. On at the end, as the test found it."""
    import gc

    was = gc.isenabled()
    monkeypatch.setattr(gc, "enable", lambda: None)
    gc.disable()
    yield
    monkeypatch.undo()
    if was:
        gc.enable()


@pytest.mark.usefixtures("collector_held_off")
def test_deepar_with_the_collector_held_off_is_exact():
    """DeepAR's 512 B gaps (docs/decisions.md, "DeepAR's 512 bytes") are the collector's
    moment, not the replay's: `NormalDistributionLoss` scores the prediction with a
    `TransformedDistribution` whose `AffineTransform` takes its loc and scale as views of
    the (8, 4, 4) fp32 prediction (512 B), and torch's `Transform.inv` makes an
    `AffineTransform <-> _InverseTransform` cycle, so each step's prediction is held by a
    cycle once the loop lets go of `out` (the doctor names it, `cyclic_garbage`). Python
    frees it at a collection, and the ledger pass, whose own records count towards the
    collector's thresholds, collects sooner than the untraced runs: the ledger let step 1's
    prediction go at step 2's `out = model(x)`, the untraced runs after step 2's optimizer
    step. With the collector on, `checkpoint:rnn` and `selective:rnn` (peak in step 2's
    encoder LSTM backward) read 341,176 B predicted against 341,688 B measured. With it
    held off in every pass, every number is exact."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        run = run_client("train_pf.py", ["--model", "deepar", "--loop", "hand", "--collect"],
                         ["checkpoint:rnn", "offload:rnn"], steps=2)
    assert run.ledger_peak == 390_188
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 413_412
    for policy, peak in (("checkpoint:rnn", 341_688), ("offload:rnn", 239_864)):
        p = run.policies[policy]
        assert (p.predicted, p.measured) == (peak, peak), policy
