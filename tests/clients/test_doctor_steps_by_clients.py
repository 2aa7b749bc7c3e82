"""`memledger doctor --steps-by forward|whole` on other people's loops without an optimizer
step (Note [A doctor without an optimizer], memledger/trace/doctor_probe.py): transformers'
evaluation (tests/clients/train_hf.py --eval, planted `--eval-bug sum-loss|keep-logits`,
also after two training steps, with `doctor -o`), sentence-transformers' `encode`
(train_sbert.py --encode), a functional update by hand through `functional_call`
(train_func.py --by-hand), Keras 3's custom loop (train_keras.py --loop custom). Correct
loops get no finding (Keras: one true cycle); each planted bug is found at its line with
its numbers.

Measured (CPU, torch 2.13.0): a 1-layer GPT-2 (hidden 32, vocab 256, 2 x 16 tokens), 4
evaluation batches, by forward: `total = total + out.loss` keeps 4 B and a graph of 118 then
169 nodes at the ends of steps 2 and 3; `logits.append(out.logits)` keeps 32,768 then
65,536 B (1 then 2 logits of 2 x 16 x 256 float32), 63 then 126 nodes. Both also ran 4
forwards under gradients that no backward used (`unused_graph`, 4 calls in steps 1-4; by
whole: 4 calls in step 1). `encode` by forward and by whole: no finding (before: the
SentenceTransformer dropped as `main()` returned, 41 tensors, 301,312 B, read as cyclic
garbage at the script's end: Note [Garbage at the script's end], trace/doctor_garbage.py).
Functional SGD left on the graph: `params`, 4 tensors, 2,704 B, 12 then 16 nodes. Keras:
2 tensors, 16,384 B a step, steps 1-4, one finding.
Also checked by hand, not pinned (cost): `trace --steps-by forward` records as many steps
as `doctor -o`; diffusers' sampling loop (train_diffusers.py --sample 4: nothing;
`--sample-bug grad`: `latents` 6,144 B, 749 then 1,052 nodes), mambapy's `--mode generate`,
torch-optimi's LOMO, train_generate.py, training + validation by whole: nothing.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: never reach the hub

if importlib.util.find_spec("sentence_transformers") is None:
    pytest.skip("sentence-transformers is not installed", allow_module_level=True)

pytestmark = pytest.mark.clients

HERE = Path(__file__).parent
HF = HERE / "train_hf.py"
EVAL = ["--steps", "0", "--eval", "4", "--layers", "1", "--hidden", "32", "--seq", "16"]
LINE_FORWARD, LINE_SUM, LINE_KEEP, LINE_PRINT = 145, 147, 151, 152   # train_hf.py's evaluate()


def _doctor(script: Path, argv: list[str], steps: int, steps_by: str = "forward"):
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(script, argv, steps, steps_by=steps_by)
    assert outcome.code == 0, outcome.reason
    return report


def _by_check(report) -> dict:
    return {f.check: f for f in report.findings}


def test_a_transformers_evaluation_loop():
    """Under no_grad: nothing. Summing `out.loss` with its graph: `total` grows a graph
    (an error at its line); keeping `out.logits`: the list (an error at its line); both ran
    their forwards under gradients (a warning at the forward)."""
    ok = _doctor(HF, EVAL, 4)
    assert ok.findings == [] and ok.steps_text() == "4 steps (by forward)"

    # the script's own warning (`float(total)` on a tensor that requires grad) is shown at
    # its line, not at the probe's (Note [A warning the script's op raised])
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        summed = _by_check(_doctor(HF, EVAL + ["--eval-bug", "sum-loss"], 4))
    assert {(Path(w.filename).name, w.lineno) for w in shown
            if "to a scalar" in str(w.message)} == {("train_hf.py", LINE_PRINT)}
    assert sorted(summed) == ["cross_step_retention", "unused_graph"]
    f = summed["cross_step_retention"]
    # before: line 149, `total += out.loss.item()`, the branch that keeps nothing (Note [A
    # plain number accumulates no history], memledger/doctor/source.py)
    assert (f.severity, f.where.line, f.evidence["steps"]) == ("error", LINE_SUM, [2, 3])
    assert f.evidence["bytes_per_step"] == [4, 4]
    assert f.evidence["nodes_per_step"] == [118, 169]
    assert f.message.startswith("`total` carries autograd history across steps (counted by "
                                "forward)")
    u = summed["unused_graph"]
    assert (u.where.line, u.evidence["calls"], u.evidence["steps"]) == \
        (LINE_FORWARD, 4, [1, 2, 3, 4])

    kept = _by_check(_doctor(HF, EVAL + ["--eval-bug", "keep-logits"], 4))
    f = kept["cross_step_retention"]
    assert (f.where.line, f.evidence["tensors_per_step"]) == (LINE_KEEP, [1, 2])
    assert f.evidence["bytes_per_step"] == [32_768, 65_536]   # 2 x 16 x 256 float32 each
    assert f.evidence["nodes_per_step"] == [63, 126]
    assert f.message.startswith("`logits` carries autograd history")

    whole = _by_check(_doctor(HF, EVAL + ["--eval-bug", "sum-loss"], 1, "whole"))
    assert list(whole) == ["unused_graph"]   # one step: nothing crosses a step
    assert (whole["unused_graph"].evidence["calls"], whole["unused_graph"].evidence["steps"]) \
        == (4, [1])


def test_training_then_validation_by_forward_and_its_ledger(tmp_path):
    """Two training steps, then three no_grad validation batches (train_hf.py --steps 2
    --eval 3), by forward: 5 steps, no finding. Before: "`out` carries autograd history
    across steps ... 2 tensor(s), 32.0 KiB, a graph of 173 nodes" (the last training
    output, kept through the validation, spent at step 3 and read as unspent at step 4:
    its backward's root, `out.loss / accum`, was a temporary; Note [A spent graph stays
    spent], memledger/trace/doctor_retention.py). `doctor -o` (its worker, here in
    process) agrees with the ledger: 5 steps, where it read 4 (Collector's last step ended
    with the script, before the probe's: `stopped_by_others`, doctor_probe.py)."""
    import json

    from memledger.doctor.worker import main as worker
    from memledger.ledger.model import Ledger

    argv = EVAL[4:] + ["--steps", "2", "--eval", "3"]
    report, status, ledger = (tmp_path / n for n in ("r.json", "s.json", "run.ledger"))
    assert worker(["--report", str(report), "--status", str(status), "--steps", "5",
                   "--steps-by", "forward", "--ledger", str(ledger), str(HF), "--",
                   *argv]) == 0
    doc = json.loads(report.read_text())
    assert (doc["steps"], doc["optimizer_steps"], doc["findings"]) == (5, 2, [])
    assert json.loads(status.read_text())["steps"] == 5
    assert Ledger.load(ledger).steps_traced == 5


def test_sentence_transformers_encode_has_no_finding():
    """`model.encode` (its own no_grad batches) on a model built inside `main()`: before,
    the model dropped as `main()` returned was read at the last step's end, the script's,
    as cyclic garbage: "41 tensors (294.2 KiB) ... a dropped `SentenceTransformer` that
    refers back to itself" (301,312 B), by forward and by whole alike."""
    argv = ["--steps", "0", "--encode", "3", "--layers", "1", "--hidden", "32"]
    by_forward = _doctor(HERE / "train_sbert.py", argv, 3)
    assert by_forward.findings == [] and by_forward.steps == 3
    whole = _doctor(HERE / "train_sbert.py", argv, 1, "whole")
    assert whole.findings == [] and whole.steps_text() == "1 step (by whole)"


def test_a_functional_update_by_hand():
    """torchopt's functional style without an optimizer (train_func.py --by-hand):
    `torch.func.grad` or detached leaves: nothing. The update left on the graph: `params`
    (4 tensors, 2,704 B, at the update's line) and the `loss` computed from them. Before,
    the step ended at the module's pre-hook inside `functional_call`, which had swapped
    `params` into the model as buffers: "4 buffers of `model` ... updated in place outside
    torch.no_grad() (an EMA or momentum-encoder update?)" at the functional_call line (Note
    [A module's state lent by functional_call], memledger/trace/doctor_retention.py)."""
    script = HERE / "train_func.py"
    for ok in ("func", "autograd"):
        assert _doctor(script, ["--by-hand", ok, "--steps", "4"], 3).findings == []
    bad = _doctor(script, ["--by-hand", "autograd-graph", "--steps", "4"], 3)
    assert [(f.check, f.severity, f.where.line) for f in bad.findings] == [
        ("cross_step_retention", "error", 66), ("cross_step_retention", "error", 68)]
    loss, params = bad.findings
    assert loss.message.startswith("`loss` carries autograd history")
    assert params.message.startswith("`params` carries autograd history across steps")
    assert params.evidence["tensors_per_step"] == [4, 4]
    assert params.evidence["bytes_per_step"] == [2_704, 2_704]   # 16x32 + 32 + 32x4 + 4 f32
    assert params.evidence["nodes_per_step"] == [12, 16]


def test_keras_custom_loop_one_cycle_one_finding():
    """Keras 3's custom loop (train_keras.py --loop custom, KERAS_BACKEND=torch, no
    torch optimizer): torch's `tree_flatten` keeps its recursive `helper` in its own
    closure, and with it Keras' `is_leaf` lambda and a 4x16x32 float32 activation, every
    forward: a true `cyclic_garbage` warning, one finding for steps 1-4 with the cycle's
    path. Before: two, the steps where Python's own collection had met the cycle first
    (its tensor still in use then) described without it ("a reference cycle of objects
    holds them", no path): Note [A cycle a collection saw before its tensors],
    memledger/trace/doctor_garbage.py. Run with `--manual-gc` (the collector off, a
    collection at each step's end): with the collector on, which steps Python's own
    collections reach first follows how many objects the process made before, and in the
    full suite the steps read 8,192 B for some steps and one step more. So this pins the
    finding, its path and its bytes, not that Note's case (an automatic collection meeting
    the cycle mid-step), which the old code also reads as one finding under `--manual-gc`."""
    if importlib.util.find_spec("keras") is None:
        pytest.skip("keras is not installed")
    rep = _doctor(HERE / "train_keras.py", ["--loop", "custom", "--steps", "5", "--manual-gc"], 4)
    (f,) = rep.findings
    assert (f.check, f.severity) == ("cyclic_garbage", "warning")
    assert f.evidence["steps"] == [1, 2, 3, 4]
    # 2 x (4x16x32 float32) a step, and in step 1 the batch Keras built the model from
    # (4x16 int64 over numpy's rows of 17: a 536 B storage) once `xb = ...` let go of it: the
    # doctor's snapshot of main()'s locals held it before (Note [A frame's locals, let go
    # of], trace/where.py), and the two records of step 1 were two entries (Note [Two
    # records of one cycle in a step], doctor/garbage.py)
    assert f.evidence["bytes_per_step"] == [16_920, 16_384, 16_384, 16_384]
    assert f.evidence["cycle"].startswith("function tree_flatten.<locals>.helper → "
                                          ".__closure__ tuple → [0] cell → function "
                                          "tree_flatten.<locals>.helper")
