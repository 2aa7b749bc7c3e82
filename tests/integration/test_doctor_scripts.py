"""Every doctor check on its planted-bug script, and the same script fixed: in-process,
probe only (the fresh-process path with the Collector is in test_doctor_cli.py).

Each row names the check, the parameters or tensor it must name, and the line it must point
at (the script's line whose code is exactly that text, so editing a script moves the
expectation with it).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest

from memledger.doctor.run import diagnose_in_process

SCRIPTS = Path(__file__).resolve().parents[1] / "doctor"


def line_of(script: str, text: str) -> int:
    lines = (SCRIPTS / script).read_text().splitlines()
    return next(i for i, s in enumerate(lines, 1) if s.split("  #")[0].strip() == text)


@functools.lru_cache(maxsize=None)
def doctor(script: str, *args: str, steps: int = 3):
    report, outcome = diagnose_in_process(SCRIPTS / script, list(args), steps)
    assert outcome.code == 0, outcome.reason
    return report


BUGS = [
    # script, args, check, severity, names in the message, line text
    ("cut.py", ["--cut", "detach"], "cut_graph", "error",
     ["`blocks.0.weight`", "`blocks.0.bias`", "`.detach()`"], "h = h.detach()"),
    ("cut.py", ["--cut", "data"], "cut_graph", "error", ["`blocks.0.weight`", "`.data`"],
     "h = h.data"),
    ("cut.py", ["--cut", "numpy"], "cut_graph", "error", ["`blocks.0.bias`", "numpy round trip"],
     "h = torch.from_numpy(np.tanh(h.detach().numpy()))"),
    ("cut.py", ["--cut", "no_grad"], "cut_graph", "error", ["`blocks.0.weight`", "no_grad"],
     "h = torch.relu(h)"),
    ("cut.py", ["--cut", "checkpoint"], "cut_graph", "error",
     ["`blocks.0.weight`", "reentrant `checkpoint`"], "h = checkpoint(self.blocks[0], x, use_reentrant=FIXED is False)"),
    ("optim_membership.py", ["--bug", "frozen"], "frozen_moving", "error",
     ["`0.weight`", "`0.bias`", "step 2, 3"], "o.step()"),
    ("optim_membership.py", ["--bug", "none_opt"], "no_optimizer", "warning",
     ["`0.weight`", "`0.bias`"], "o.step()"),
    ("optim_membership.py", ["--bug", "two_opts"], "two_optimizers", "error",
     ["`0.weight`", "2 optimizers"], "o.step()"),
    ("optim_membership.py", ["--bug", "stale"], "stale_optimizer", "error",
     ["AdamW", "4 parameters", "`0.weight`", "never trains"], "o.step()"),
    ("grad_leak.py", [], "grad_leak", "error", ["4 parameters", "step 2, 3"], "loss.backward()"),
    # the generator's backward adds to the discriminator's used gradient, which its step
    # then consumes unzeroed
    ("two_models.py", ["--loop", "gan", "--bug"], "grad_leak", "error", ["4 parameters"],
     "loss_g.backward()"),
    # the same leak with the discriminator frozen while the generator trains: frozen when
    # the doctor first saw it, so its gradients once went unseen (no finding)
    ("two_models.py", ["--loop", "gan", "--bug", "--freeze-d"], "grad_leak", "error",
     ["4 parameters"], "loss_d.backward()"),
    # a Function that returns None for a parameter: once "cleared between backward and
    # step" (zeroed_before_step), then "cut by an op under no_grad" (its forward)
    ("custom_function.py", ["--bug"], "unused_parameter", "warning",
     ["`w`", "computed no gradient (None)", "autograd.Function"], "opt.step()"),
    # a student trained after its teacher is the model, named as the ledger names it
    # (Note [The model]): `0.weight`, not `Sequential.0.weight`
    ("two_models.py", ["--loop", "distill", "--bug"], "no_optimizer", "warning",
     ["`2.weight`", "`2.bias`"], "opt.step()"),
    # step(closure): the gradients are read after the closure's backward, not before it
    ("closure.py", ["--bug", "nan"], "nonfinite_grad", "error", ["step 3", "4 parameters"],
     "opt.step(closure)"),
    ("fused_adamw.py", ["--bug"], "no_update", "warning", ["4 had gradients"], "opt.step()"),
    ("accumulation.py", ["--bug", "tokens"], "token_denominator", "warning",
     ["[30, 10]", "3.00x", "40 valid tokens"], "loss = nn.functional.cross_entropy(logits, "
     "labels) / K"),
    ("accumulation.py", ["--bug", "nodiv"], "loss_not_divided", "warning",
     ["2 backward passes", "loss / 2"], "loss.backward()"),
    # any torch.nn.functional loss, not only cross_entropy / nll_loss (mse was missed)
    ("accumulation.py", ["--bug", "msenodiv"], "loss_not_divided", "warning",
     ["2 backward passes", "loss / 2"], "loss.backward()"),
    ("updates.py", ["--bug", "nonfinite"], "nonfinite_grad", "error", ["step 2, 3", "4 parameters"],
     "scaler.step(opt)"),
    ("updates.py", ["--bug", "scaler"], "dropped_update", "warning",
     ["1 of 4 backward passes", "GradScaler skipped"], "scaler.scale(loss).backward()"),
    ("updates.py", ["--bug", "zeroed"], "zeroed_before_step", "error", ["4 parameters"],
     "scaler.step(opt)"),
    ("updates.py", ["--bug", "sched"], "scheduler_order", "warning", ["StepLR"],
     "scaler.step(opt)"),
    ("updates.py", ["--bug", "sched"], "scheduler_rate", "warning",
     ["6 times for 3 optimizer steps"], "scaler.step(opt)"),
    ("retention.py", [], "cross_step_retention", "error", ["`total_loss`", "up from 12"],
     "total_loss += loss"),
    ("retention.py", ["--bug", "list"], "cross_step_retention", "error", ["`losses`"],
     "losses.append(loss)"),
    ("retention_attr.py", [], "cross_step_retention", "error", ["`seen`", "up from 10"],
     "self.seen = self.seen + out.sum(0)"),
    ("eval_mode.py", [], "eval_mode", "warning", ["BatchNorm1d/Dropout", "step 2, 3"],
     "out = model(x)"),
]


@pytest.mark.parametrize("script,args,check,severity,names,line", BUGS,
                         ids=[f"{b[0]}:{b[2]}" for b in BUGS])
def test_planted_bug_is_caught_naming_what_and_where(script, args, check, severity, names,
                                                    line):
    report = doctor(script, *args)
    (f,) = [f for f in report.findings if f.check == check]
    assert f.severity == severity
    for n in names:
        assert n in f.message, (n, f.message)
    assert f.where.file == str(SCRIPTS / script)
    assert f.where.line == line_of(script, line)
    assert report.ok is False and report.steps == 3


FIXED = [("cut.py", ["--cut", c, "--fixed"]) for c in ("detach", "checkpoint")] + [
    ("optim_membership.py", ["--fixed"]), ("optim_membership.py", ["--bug", "stale", "--fixed"]),
    ("master_weights.py", []),
    ("grad_leak.py", ["--fixed"]),
    ("accumulation.py", ["--fixed"]), ("retention.py", ["--fixed"]),
    ("retention_attr.py", ["--fixed"]), ("eval_mode.py", ["--fixed"]),
    ("eval_mode.py", ["--fixed", "--frozen-bn"]),   # frozen on purpose: eval, no gradient
    ("eval_mode.py", ["--fixed", "--loss-net"]),    # a frozen loss network: no gradient
                                                    # reaches it (its Dropout once warned)
    # two optimizers: a GAN (the generator's backward adds to the discriminator's used
    # gradient, zeroed before its step; its loss kept until the next iteration) and a
    # backbone + head after one backward (`loss` alive between the two step() calls): each
    # once had a false grad_leak error or cross_step_retention warning
    ("two_models.py", ["--loop", "gan"]), ("two_models.py", ["--loop", "heads"]),
    ("two_models.py", ["--loop", "distill"]),
    # parameters frozen when first seen and trained later (progressive unfreezing, a GAN's
    # frozen discriminator) once read as `unused_parameter`: their gradients went unseen
    ("two_models.py", ["--loop", "unfreeze"]), ("two_models.py", ["--loop", "gan", "--freeze-d"]),
    # step(closure) with the last micro-batch inside it (Lightning's accumulation) once read
    # as dropped_update; LBFGS calls the closure several times per step
    ("closure.py", ["--accum", "2", "--fixed"]), ("closure.py", ["--lbfgs", "--fixed"]),
    # fused AdamW bumps no version counter: its updates once read as no_update
    ("fused_adamw.py", []),
    # every gradient exactly zero as backward computed it (a hinge whose margins are met)
    # once read as zeroed_before_step
    ("custom_function.py", ["--hinge"]),
    # sparse gradients: the probe's `.any()` and `isfinite` once crashed the script
    ("sparse_embedding.py", []),
] + [("updates.py", ["--bug", b, "--fixed"]) for b in ("scaler", "sched")]   # with --fixed,
# nonfinite and zeroed run the very loop of sched (the bug flags only pick the bug)


@pytest.mark.parametrize("script,args", FIXED, ids=[f"{s}:{' '.join(a)}" for s, a in FIXED])
def test_the_same_script_fixed_has_no_finding(script, args):
    report = doctor(script, *args)
    assert report.findings == [] and report.ok


def test_exact_numbers_of_the_token_denominator():
    (f,) = [f for f in doctor("accumulation.py", "--bug", "tokens").findings]
    # micro-batches of 30 and 10 valid tokens, K = 2: weights 1/60 and 1/20, ratio 3;
    # against the right 1/40: 40/60 = 0.6667 and 40/20 = 2.0
    assert f.evidence == {"micro_batches": 2, "tokens": [30, 10], "total_tokens": 40,
                          "weight_ratio": 3.0, "relative_weights": [0.6667, 2.0],
                          "steps": [1, 2, 3]}


def test_deliberate_accumulation_is_not_a_leak():
    # 2 backward passes per step, then step, then zero_grad: no grad_leak, no dropped update
    report = doctor("grad_leak.py", "--fixed")
    assert report.ok


SMALL = {"mlp": ["--batch-size", "8"], "cnn": ["--batch-size", "4"],   # same code, less work
         "gpt": ["--batch-size", "2", "--n-layer", "2", "--block-size", "16"],
         "llama": ["--batch-size", "1", "--seq-len", "16", "--n-layers", "2"]}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_no_false_positive_on_bundled_examples(name):
    example = Path(__file__).resolve().parents[2] / "examples" / f"train_{name}.py"
    if not example.exists():
        pytest.skip(f"{example.name} is not in this checkout")
    report, outcome = diagnose_in_process(example, SMALL[name], 3)
    assert outcome.code == 0 and [f.line() for f in report.findings] == []


@pytest.mark.parametrize("script", ["hf_gpt2.py", "hf_lora.py"])
def test_no_false_positive_on_transformers_and_peft_loops(script):
    for pkg in ("transformers", "peft"):
        if importlib.util.find_spec(pkg) is None:
            pytest.skip(f"{pkg} is not installed (pip install '.[dev]')")
    report = doctor(script)
    assert [f.line() for f in report.findings] == []
