"""mambapy (tests/clients/train_mambapy.py): pure-PyTorch Mamba, its parallel scan a custom
autograd Function that clones its inputs, scans them in place and saves the clone its
output is a view of.

Measured once (`memledger trace --steps 2 --no-timing`, then `compare` with checkpoint,
selective and offload of the blocks, helper hunt38a, 2026-12-05): every mode's ledger
explains every byte of the allocator's peak, and every policy is predicted to the byte
(pscan 955.7 KiB; `checkpoint:mamba.layers.*` 660.9, `selective` 685.6, `offload` 567.2
KiB; the same in `seq`, `lm`, `jamba`, `vim`, under bf16 autocast, and at a sequence
length that pads), gradients bitwise, the doctor silent. A model trained through its
recurrent `step` method never calls its layers: a policy on them is refused by both sides.
"""

import tempfile
from pathlib import Path

import pytest

from tests.clients.harness import imported_first, skip_without

pytestmark = pytest.mark.clients
skip_without("mambapy")
_imported = imported_first("mambapy")

HERE = Path(__file__).resolve().parent


def ledger_pass(script: str, argv: list[str], steps: int = 2, steps_by: str = "optimizer"):
    """`tests/clients/harness.py`'s `ledger_pass` without importing the harness, which
    imports peft (3 s of this file's 8 s budget, for scripts none of which use it)."""
    from memledger.ledger.model import Ledger
    from memledger.trace import worker
    from memledger.trace.script import earlier_objects_frozen

    with tempfile.TemporaryDirectory(prefix="memledger-ledger-") as tmp, \
            earlier_objects_frozen():
        out = Path(tmp) / "run.ledger"
        code = worker.main(["ledger", "--steps-by", steps_by, "--out", str(out), "--status",
                            str(out.with_suffix(".status.json")), "--steps", str(steps),
                            str(HERE / script), "--", *argv])
        assert code == 0, f"ledger pass of {script} {argv}: exit {code}"
        return Ledger.load(out)


def predicted_peak(led, policy: str) -> int:
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    return predict(led, [parse_policy(policy)], bandwidth=1e9).policies[0].peak_bytes


def test_generation_through_the_models_step_method_is_a_step_per_token():
    """`LM.step(token, caches)` calls the model's parts one by one, and each top-level part
    call began a forward: `--steps-by forward --steps 3` stopped after the first token's
    embedding, norm and in_proj (99 events, peak 36,896 B); now three tokens, 413 events
    (Note [A forward through the model's methods], trace/steps.py)."""
    led = ledger_pass("train_mambapy.py", ["--mode", "generate", "--steps", "8"], steps=3,
                      steps_by="forward")
    assert led.steps["ev"].tolist() == [196, 304, 412] and led.n_events == 413
    assert led.peak().bytes == 53_476


def test_a_model_trained_through_step_its_layers_refused_its_norms_priced():
    """Trained through `LM.step`, the layers are never called: predict (and measure) refuse
    a policy on them with the advice to call the module itself, which read "(`self.0(x)`)"
    for an item of a ModuleList; now `self.layers[0](x)`. Under muP the RMSNorms hold no
    parameters, and each layer's `norm`, called by `ResidualBlock.step` after the previous
    part's call ended the forward phase, was in the loss phase: predict refused
    `checkpoint:mamba.layers.*.norm` ("matches no module") while measure ran it, 173,812 B
    (`offload:` 153,076 B; `memledger measure --steps 1`, 2 positions; 375,100 and 333,884
    B at 4 positions and 2 steps); priced so now (Note [Module calls in the loss phase],
    replay/prepared.py)."""
    from memledger.errors import PolicyError
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    led = ledger_pass("train_mambapy.py", ["--mode", "step", "--mup", "--seq-len", "2"],
                      steps=1)
    with pytest.raises(PolicyError) as refused:
        predict(led, [parse_policy("checkpoint:mamba.layers.*")], bandwidth=1e9)
    # the method that ran, named (Note [The method that ran]): once a guess, `.forward(x)`
    assert "through its method `step` (`mamba.layers.0.step(...)`)" in str(refused.value)
    assert "call the module itself (`self.layers[0](x)`)" in str(refused.value)
    assert predicted_peak(led, "checkpoint:mamba.layers.*.norm") == 173_812
    assert predicted_peak(led, "offload:mamba.layers.*.norm") == 153_076


def test_the_parallel_scans_saved_clone_is_predicted_to_the_byte():
    """PScan saves `X`, the clone it scans in place, whose transposed slice is the output:
    offloading the blocks moves the save while the output keeps the storage, checkpointing
    them drops both. The ledger pass alone (the harness's passes and measure cost 2 s more
    of this file's budget); the numbers as `memledger trace` and `measure --steps 1` gave
    them at 8 positions: allocator 478,604 B, offload 281,548 B, checkpoint 335,500 B."""
    led = ledger_pass("train_mambapy.py", ["--mode", "pscan", "--seq-len", "8"], steps=1)
    assert led.peak().bytes == 478_604
    assert predicted_peak(led, "offload:mamba.layers.*") == 281_548
    assert predicted_peak(led, "checkpoint:mamba.layers.*") == 335_500
