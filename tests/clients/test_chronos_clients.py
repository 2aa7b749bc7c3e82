"""chronos-forecasting (tests/clients/train_chronos.py): Amazon's time-series foundation
models built from configs (nothing downloaded) and fine-tuned as their users do:
Chronos-Bolt (instance normalisation, patching, a T5 encoder-decoder with one decoder
token, its own quantile loss) in a plain AdamW loop, and Chronos-2 through
`Chronos2Pipeline.fit` (a copy of the model, `Chronos2Dataset`'s random windows,
`Chronos2Trainer`, LoRA by peft on its default targets).

Measured (`tests/clients/harness.py run_client`, the helper hunt43b, 2026-12-06,
chronos-forecasting 2.3.2, transformers 5.25.0, torch 2.13.0 CPU; 2 steps unless said):
- `--mode bolt`: the ledger equal to the allocator, 261,352 B; `checkpoint:encoder.block.*`
  249,476 B, `selective:encoder.block.*` 258,132 B, `offload:encoder.block.*` 226,848 B,
  `checkpoint:encoder.block.0+offload:decoder.block.1` 249,476 B,
  `checkpoint:input_patch_embedding` 263,336 B, `offload:output_patch_embedding` 261,352 B,
  predicted and measured; checkpoint and selective on `decoder.block.*` refused by both
  alike (T5's decoder stores its keys and values into the EncoderDecoderCache it is
  handed: its config's use_cache). The same with `--nan` (missing values); with
  `--grad-ckpt --bf16` 257,944 B (7,416 B of kernel scratch), the model's own
  checkpointing refused by both as already there, offloads exact; `--trainer`
  (Chronos2Trainer) 262,008 B, every policy exact.
- `--mode chronos2` (plain loop, group attention over pairs): 239,860 B;
  `checkpoint:encoder.block.*` 207,408 B, `selective:encoder.block.*` 223,504 B,
  `offload:encoder.block.*` 166,164 B, `checkpoint:encoder.block.*.layer.1` 226,356 B,
  `offload:@MHA` 190,708 B; `--trainer` (Chronos2Trainer) 240,548 B and every policy
  exact; `--trainer --bf16` 239,524 B; `--nan --bf16 --attn eager` 225,780 B.
- `--mode chronos` (the original Chronos: MeanScaleUniformBins tokens, T5 cross-entropy):
  981,510 B; `checkpoint:encoder.block.*` 497,780 B, `selective:encoder.block.*`
  698,054 B, `offload:encoder.block.*` 457,470 B, each exact.
- `--mode fit`: 282,592 B; `--covariates` 343,440 B; `--validate` 282,720 B;
  `--accumulate 2` 317,200 B; `--lora` 238,812 B; every policy above predicted = measured.
- The doctor finds nothing on any of these loops (3 steps each).
- `plan` on `--mode chronos` (1 step, 888,646 B): it took the encoder's blocks alone and at
  238,548 B found no fit (lowest 364,606 B) while `offload:encoder.block.*+offload:
  decoder.block.*` is predicted and measured 238,548 B; it plans over both stacks now
  (Note [Stacks beside the blocks], replay/plan.py) and picks that policy.
"""

import contextlib
import importlib.util
import io

import pytest

if importlib.util.find_spec("chronos") is None:
    pytest.skip("chronos-forecasting is not installed", allow_module_level=True)

from tests.clients.harness import gaps_of, run_client  # noqa: E402

pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]

CACHE = "stores new tensors into the EncoderDecoderCache it is handed"


def test_bolt_quantile_loss_every_policy_exact_decoder_cache_refused_alike():
    """Chronos-Bolt's encoder blocks under checkpoint and offload, predicted to the byte;
    its decoder's blocks refused for checkpoint by predict and measure with one line."""
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_chronos.py", ["--mode", "bolt"],
                         ["checkpoint:encoder.block.*", "offload:encoder.block.*",
                          "checkpoint:decoder.block.*"], steps=2)
    assert run.ledger_peak == run.allocator_peak == 261_352
    assert gaps_of(run) == {}
    assert run.policies["checkpoint:encoder.block.*"].measured == 249_476
    assert run.policies["offload:encoder.block.*"].measured == 226_848
    p = run.policies["checkpoint:decoder.block.*"]
    assert p.predicted is None and p.measured is None
    assert p.predict_refusal == p.measure_refusal and CACHE in p.predict_refusal, p


def test_chronos2_pipeline_fit_with_lora_exact():
    """`Chronos2Pipeline.fit(finetune_mode="lora")`: a copy of the model under peft, trained
    by Chronos2Trainer; the policies name the peft model's modules."""
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_chronos.py", ["--mode", "fit", "--lora"],
                         ["selective:base_model.model.encoder.block.*", "offload:@MHA"], steps=2)
    assert run.ledger_peak == run.allocator_peak == 238_812
    assert gaps_of(run) == {}
    assert run.policies["selective:base_model.model.encoder.block.*"].measured == 248_696
    assert run.policies["offload:@MHA"].measured == 177_372


def test_plan_searches_the_decoders_blocks_beside_the_encoders():
    """The original Chronos, a T5 over tokenized series: `plan` searched `encoder.block.*`
    alone and said no candidate fits 238,548 B (lowest 364,606 B, the encoder offloaded);
    with the decoder's stack it finds the encoder and decoder offloaded, measured alike
    (Note [Stacks beside the blocks], replay/plan.py)."""
    from memledger.replay.plan import plan

    both = "offload:encoder.block.*+offload:decoder.block.*"
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_chronos.py", ["--mode", "chronos"], [both], steps=1)
    assert run.ledger_peak == run.allocator_peak == 888_646
    rep = plan(run.ledger, 238_548, front_points=0)
    assert rep.blocks == ["encoder.block.0", "encoder.block.1", "decoder.block.0",
                          "decoder.block.1"]
    assert (rep.fits, rep.policy) == (True, both), rep.policy
    assert rep.predicted_peak_bytes == run.policies[both].predicted == \
        run.policies[both].measured == 238_548
    # the decoder's blocks write T5's EncoderDecoderCache: only offload acts on them, and
    # plan says so of them alone (it read "checkpoint, selective ruled out: each would
    # re-run decoder.block.0, ...", as if the encoder's could not be checkpointed either:
    # Note [Options refused on some blocks], replay/plan.py)
    from memledger.commands.plan import _on_blocks

    assert set(rep.refused) == {"checkpoint", "selective"}
    assert rep.refused_on == {k: ["decoder.block.0", "decoder.block.1"]
                              for k in ("checkpoint", "selective")}
    assert _on_blocks("checkpoint, selective", rep) == " on decoder.block.*"
