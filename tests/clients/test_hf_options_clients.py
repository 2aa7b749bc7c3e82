"""transformers' Trainer and Seq2SeqTrainer with the TrainingArguments that change what a
step does (tests/clients/train_hf_options.py): gradient accumulation, label smoothing,
NEFTune's noise hook, other optimizers, an evaluation loop between steps that gathers the
logits, an encoder-decoder model. The basic Trainer loop is test_real_clients.py's."""

from __future__ import annotations

import pytest

from tests.clients.harness import imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("transformers")
_imported = imported_first("transformers")


def test_accumulation_smoothing_noise_and_evaluation_exact():
    """gradient_accumulation_steps=2, label_smoothing_factor, neftune_noise_alpha (a forward
    hook on wte adding noise in training: checkpointing wte re-draws the same noise) and an
    evaluation on 4 examples after each step: a step is an optimizer update (2 forwards
    each), the ledger explains every byte, and each policy is predicted as it measures."""
    run = run_client("train_hf_options.py", [
        "--accum", "2", "--smoothing", "0.1", "--neftune", "5", "--eval", "--optim", "sgd",
        "--seq", "8", "--steps", "3"], ["checkpoint:transformer.wte+offload:transformer.h.*"],
        steps=2)
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    sc = run.ledger.scopes
    train = sc[(sc["mod"] == "transformer.wte") & ~sc.get("nograd", False).fillna(False)
               .astype(bool)]
    assert train.groupby("step").size().to_dict() == {1: 2, 2: 2}   # micro-batches per step
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)


def test_the_doctor_sees_undivided_accumulation_through_evaluations():
    """BART under Trainer with gradient_accumulation_steps=2: BART's forward takes
    **kwargs, so the Trainer hands it `num_items_in_batch` and does not divide the loss,
    but BART's loss is a plain mean: each update is the sum of 2 micro-batch means (a true
    finding). With an evaluation after each step, the eval loop's no_grad cross_entropy
    calls joined the next backward's losses, and the check saw steps [1] of 2; now [1, 2]
    (Note [A loss no backward can run from], trace/doctor_probe.py)."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    report, outcome = diagnose_in_process(HERE / "train_hf_options.py", [
        "--model", "bart", "--accum", "2", "--eval", "--eval-size", "2", "--seq", "8",
        "--steps", "3"], 2)
    assert outcome.code == 0, outcome.reason
    assert [(f.check, f.evidence.get("steps")) for f in report.findings] == \
        [("loss_not_divided", [1, 2])], [f.line() for f in report.findings]


def test_fake_run_names_the_library_that_reads_values():
    """A `compute_metrics` makes the evaluation loop gather the logits as numpy arrays:
    `trace --fake` cannot, and its one line named the script's `trainer.train()` with "skip
    it under --fake (e.g. log only when not faking)"; it names transformers' line now."""
    from tests.clients.harness import ledger_pass

    with pytest.raises(AssertionError) as refused:   # the worker's exit 2 and its one line
        ledger_pass("train_hf_options.py", ["--eval", "--seq", "8", "--steps", "2"],
                    fake_device="cpu")
    said = str(refused.value).splitlines()[0]
    assert "exit 2: memledger: cannot run fake at " in said, said
    assert "`transformers` (called by the script) at transformers/trainer_pt_utils.py:" \
        in said and "`.numpy()` reads tensor values" in said, said


def test_fake_run_of_a_generation_ends_at_its_max_length():
    """A callback that generates greedily after each step (`--sample 6`): generate's loop
    ends when `unfinished & ~(max_length_done | eos_done)` is all zero, and the EOS half is
    read off the sampled tokens, which a fake run does not have: `trace --fake` never ended
    (the old code ran until interrupted). A known all-True operand of `|` (all-False of `&`)
    fixes the answer (Note [An answer one known operand fixes], trace/fake.py): the fake
    run traces its 2 steps, and the sampling after step 1 is 6 decoder calls, as many as
    the real run's."""
    from tests.clients.harness import ledger_pass

    led = ledger_pass("train_hf_options.py", ["--sample", "6", "--steps", "3"],
                      fake_device="cpu")
    assert led.summary().steps_traced == 2
    sc = led.scopes
    nograd = sc["nograd"].fillna(False).astype(bool) if "nograd" in sc else False
    assert int(((sc["mod"] == "transformer.h.0") & nograd).sum()) == 6
