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


def line_of(script: str, text: str | tuple[str, int]) -> int:
    """The line whose code is `text`; `(text, n)`: the n-th such line."""
    text, nth = text if isinstance(text, tuple) else (text, 1)
    lines = (SCRIPTS / script).read_text().splitlines()
    found = [i for i, s in enumerate(lines, 1) if s.split("  #")[0].strip() == text]
    return found[nth - 1]


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
    # F.layer_norm hands its weight and bias over by keyword: once "unreached" (a warning
    # beside the error; Note [Parameters handed over by keyword])
    ("cut.py", ["--cut", "no_grad_norm"], "cut_graph", "error",
     ["`blocks.0.weight`", "`blocks.0.bias`", "`norm.weight` and 1 more", "no_grad"],
     "h = self.norm(h)"),
    # Note [A part the model runs frozen] (trace/doctor_probe.py): once an error saying
    # "run this part of the forward with grad enabled"
    ("cut.py", ["--cut", "frozen"], "cut_graph", "warning",
     ["`blocks.0.weight`", "`blocks.0.bias`", "eval mode under `torch.no_grad()`",
      "leave them out of the optimizer"], "h = self.blocks[0](x)"),
    # ... a Sequential the forward puts in eval by one call (its Linears' holder in eval
    # too), and a validation under no_grad that reads it first in each later window: once
    # the error (discrete-key-value-bottleneck-pytorch's encoder)
    ("cut.py", ["--cut", "frozen", "--encoder", "--validate"], "cut_graph", "warning",
     ["`blocks.0.0.weight`", "steps 1-3", "eval mode under `torch.no_grad()`"],
     "h = self.blocks[0](x)"),
    ("cut.py", ["--cut", "checkpoint"], "cut_graph", "error",
     ["`blocks.0.weight`", "reentrant `checkpoint`"], "h = checkpoint(self.blocks[0], x, use_reentrant=FIXED is False)"),
    ("optim_membership.py", ["--bug", "frozen"], "frozen_moving", "error",
     ["`0.weight`", "`0.bias`", "steps 2 and 3"], "o.step()"),
    ("optim_membership.py", ["--bug", "none_opt"], "no_optimizer", "warning",
     ["`0.weight`", "`0.bias`"], "o.step()"),
    ("optim_membership.py", ["--bug", "two_opts"], "two_optimizers", "error",
     ["`0.weight`", "2 optimizers"], "o.step()"),
    ("optim_membership.py", ["--bug", "stale"], "stale_optimizer", "error",
     ["AdamW", "4 parameters", "`0.weight`", "never trains"], "o.step()"),
    # Note [Copies made in every step] (doctor/params.py): not "the model rebuilt"
    ("optim_membership.py", ["--bug", "copies"], "stale_optimizer", "error",
     ["AdamW", "4 parameters", "the 12 that do", "copies of the parameters made in the step",
      "copy_initial_weights=False"], "o.step()"),
    # Note [A backward that reached no parameter the step holds] (doctor/updates.py)
    ("optim_membership.py", ["--bug", "copies"], "no_gradient", "error",
     ["steps 1-3", "backward ran 3 times in those steps and reached none of them"],
     "o.step()"),
    # Note [A step that finds its own direction] (doctor/updates.py): Adam with no backward
    # still steps on nothing; the Gauss-Newton step that moves them itself is clean (FIXED)
    ("second_order.py", ["--bug", "adam"], "no_gradient", "error",
     ["steps 1-3", "call backward()"], "opt.step()"),
    ("grad_leak.py", [], "grad_leak", "error", ["4 parameters", "steps 2 and 3"], "loss.backward()"),
    # a clip between backward and step changes .grad in place: the leak once went unseen
    ("grad_leak.py", ["--clip"], "grad_leak", "error", ["4 parameters", "steps 2 and 3"],
     "loss.backward()"),
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
    # WGAN-GP's penalty from torch.autograd.grad without create_graph=True: a constant
    # added to the critic's loss, which trained nothing and went unseen
    ("gradient_penalty.py", ["--bug"], "dead_penalty", "error",
     ["without create_graph=True", "steps 1-3"],
     "grad, = torch.autograd.grad(D(mixed).sum(), mixed)"),
    # step(closure): the gradients are read after the closure's backward, not before it
    ("closure.py", ["--bug", "nan"], "nonfinite_grad", "error", ["step 3", "4 parameters"],
     "opt.step(closure)"),
    # a cut, and a clip before backward, inside the closure (Lightning's forward, backward
    # and clipping all run there): once an unused_parameter warning, and nothing
    ("closure.py", ["--cut"], "cut_graph", "error", ["`0.weight`", "`.detach()`"],
     "h = h.detach()"),
    ("closure.py", ["--clip", "before"], "clip_order", "error", ["before the backward()"],
     "nn.utils.clip_grad_norm_(model.parameters(), 1.0)"),
    # a zero_grad between two backward passes, the first gradient unused
    ("sam.py", ["--no-ascent"], "dropped_update", "warning", ["3 of 6 backward passes",
     "a zero_grad ran before any step used them"],
     "nn.functional.cross_entropy(model(x), y).backward()"),
    # extragradient's first two gradients zeroed without the extrapolation using them
    ("extragradient.py", ["--no-extrapolation"], "dropped_update", "warning",
     ["5 of 12 backward passes", "a zero_grad ran before any step used them"],
     "(nn.functional.cross_entropy(logits, y) + lam.detach() * g).sum().backward()"),
    # a Hessian refresh's backward (SophiaG's) whose update_hessian() is forgotten, or
    # whose gradients are only logged: Note [Gradients an optimizer takes outside its step]
    ("hessian_refresh.py", ["--bug", "skip"], "dropped_update", "warning",
     ["2 of 5 backward passes", "a zero_grad ran before any step used them"],
     "F.cross_entropy(logits, sampled).backward()"),
    ("hessian_refresh.py", ["--bug", "norm"], "dropped_update", "warning",
     ["2 of 5 backward passes"], "F.cross_entropy(logits, sampled).backward()"),
    # ... or with no zero_grad after it: the next step's gradient summed onto the refresh's
    ("hessian_refresh.py", ["--bug", "leak"], "grad_leak", "error",
     ["4 parameters", "steps 2 and 3", "took into its state outside step()"],
     "F.cross_entropy(model(x), y).backward()"),
    # ... or keeping its distribution: a branch no backward ran (its normalised logits and
    # their softmax) holds 128 + 128 + 32 B of saves through the next step (Note [A branch
    # no backward ran, kept past a later backward]): no finding on the old code
    ("hessian_refresh.py", ["--bug", "keep"], "cross_step_retention", "warning",
     ["`dist` (and `logits`, which holds part of it) keep", "hessian_refresh.py:"
      f"{line_of('hessian_refresh.py', 'F.cross_entropy(logits, sampled).backward()')}",
      "(`Sub`, `Logsumexp`, `Softmax`)", "288 B saved for backward", "steps 2 and 3",
      "`del dist, logits`"], "dist = torch.distributions.Categorical(logits=logits)"),
    # SAM's first gradient not zeroed: the step adds gradients taken at two weights
    ("sam.py", ["--no-zero"], "mixed_gradient", "error",
     ["4 parameters (`0.weight`, `0.bias`, `2.weight` and 1 more)", "steps 1-3",
     "first_step(zero_grad=True)"], ("nn.functional.cross_entropy(model(x), y).backward()", 2)),
    ("moe.py", ["--bug"], "unused_parameter", "warning",
     ["2 trainable parameters (`1.norm.weight`, `1.norm.bias`)", "did not run"],
     "opt.step()"),
    # layers in an nn.ParameterList: their module (the list's holder) ran, and its output
    # was dropped; once "did not run" (Note [Parameters a container holds])
    ("param_slots.py", ["--bug", "list"], "unused_parameter", "warning",
     ["2 trainable parameters (`mlp.weights.0`, `mlp.weights.1`)",
      "their modules ran but the output never reached the loss"], "opt.step()"),
    # the MLP run by torch.func.functional_call with copies in its weights' places; once
    # "did not run" (Note [Parameters a call ran without])
    ("param_slots.py", ["--bug", "func"], "unused_parameter", "warning",
     ["2 trainable parameters (`mlp.weights.0`, `mlp.weights.1`) got no gradient in steps "
      "1-3 while 6 others did: their modules ran, but with other tensors in their place "
      "(`torch.func.functional_call`"], "opt.step()"),
    # a module that returns its input before reading its parameters: it ran and its output
    # reached the loss; once only "the output never reached the loss" (Note [A parameter
    # its module never read], memledger/doctor/graph.py)
    ("early_return.py", ["--bug"], "unused_parameter", "warning",
     ["1 trainable parameter (`gate.scale`)", "or their forward never read them"],
     "opt.step()"),
    ("fused_adamw.py", ["--bug"], "no_update", "warning", ["4 had gradients",
     "the learning rate is 0"], "opt.step()"),
    ("accumulation.py", ["--bug", "tokens"], "token_denominator", "warning",
     ["[30, 10]", "3.00x", "40 valid tokens"], "loss = nn.functional.cross_entropy(logits, "
     "labels) / K"),
    ("accumulation.py", ["--bug", "nodiv"], "loss_not_divided", "warning",
     ["2 backward passes", "loss / 2"], "loss.backward(retain_graph=RETAIN)"),
    # any torch.nn.functional loss, not only cross_entropy / nll_loss (mse was missed)
    ("accumulation.py", ["--bug", "msenodiv"], "loss_not_divided", "warning",
     ["2 backward passes", "loss / 2"], "loss.backward(retain_graph=RETAIN)"),
    # Note [A loss reduced after the call] (doctor/accumulation.py): a loss called with
    # reduction='none' and reduced by the script had no value, and drew nothing
    ("accumulation.py", ["--bug", "nonenodiv"], "loss_not_divided", "warning",
     ["2 backward passes", "loss / 2"], "loss.backward(retain_graph=RETAIN)"),
    ("accumulation.py", ["--bug", "noneshort"], "short_accumulation", "warning",
     ["step 3 used 1 backward pass on loss / 2", "steps 1 and 2 used 2",
      "1/2 of the mean gradient"], "loss.backward(retain_graph=RETAIN)"),
    # Note [A step short of micro-batches]: the last step of one micro-batch on loss / 2
    ("accumulation.py", ["--bug", "short"], "short_accumulation", "warning",
     ["step 3 used 1 backward pass on loss / 2", "steps 1 and 2 used 2",
      "1/2 of the mean gradient"], "loss.backward(retain_graph=RETAIN)"),
    # retain_graph=True alone: each micro-batch still has a forward of its own
    ("accumulation.py", ["--bug", "nodiv", "--retain"], "loss_not_divided", "warning",
     ["2 backward passes", "loss / 2"], "loss.backward(retain_graph=RETAIN)"),
    ("updates.py", ["--bug", "nonfinite"], "nonfinite_grad", "error", ["steps 2 and 3", "4 parameters"],
     "scaler.step(opt)"),
    ("updates.py", ["--bug", "scaler"], "dropped_update", "warning",
     ["1 of 4 backward passes", "GradScaler skipped"], "scaler.scale(loss).backward()"),
    ("updates.py", ["--bug", "zeroed"], "zeroed_before_step", "error", ["4 parameters"],
     "scaler.step(opt)"),
    # the scheduler's own step() call (found in the source by the variable holding it); it
    # once pointed at the first optimizer.step()
    ("updates.py", ["--bug", "sched"], "scheduler_order", "warning", ["StepLR"],
     "sched.step()"),
    ("updates.py", ["--bug", "sched1"], "scheduler_order", "warning", ["StepLR"],
     "sched.step()"),
    ("updates.py", ["--bug", "sched"], "scheduler_rate", "warning",
     ["6 times for 3 optimizer steps"], "sched.step()"),
    # the line of the second step() on the same gradients: after the loop, or the copy
    ("double_step.py", ["--bug", "copy"], "double_step", "error",
     ["(AdamW) ran 2 times", "step 2", "had stepped them already", "4 parameters"],
     ("opt.step()", 3)),
    ("double_step.py", ["--bug", "accum"], "double_step", "error",
     ["(AdamW) ran 2 times", "step 3", "had stepped them already", "4 parameters"],
     ("opt.step()", 2)),
    ("clip_order.py", ["--bug", "before"], "clip_order", "error",
     ["clip_grad_norm_() ran before the backward()", "steps 2 and 3", "4 parameters"],
     ("clip(model.parameters(), 1.0)", 1)),
    ("clip_order.py", ["--bug", "after"], "clip_order", "error",
     ["clip_grad_norm_() ran after optimizer.step()", "steps 1 and 2", "4 parameters"],
     ("clip(model.parameters(), 1.0)", 3)),
    ("clip_order.py", ["--bug", "value"], "clip_order", "error",
     ["clip_grad_value_() ran after optimizer.step()", "4 parameters"],
     ("clip(model.parameters(), 1.0)", 3)),
    ("clip_order.py", ["--bug", "scaler"], "clip_order", "error",
     ["GradScaler's scale (65536)", "max_norm=1 acts as 1.53e-05", "steps 1-3",
      "scaler.unscale_(optimizer)"], ("clip(model.parameters(), 1.0)", 2)),
    # a gradient filter after the step (Note [A gradient written after the step] in
    # trace/doctor_order.py): no finding on the old code
    ("late_grad_write.py", [], "written_after_step", "error",
     ["4 parameters", "changed after optimizer.step()", "steps 1 and 2"],
     "opt.zero_grad(set_to_none=\"--set-none\" in sys.argv)"),
    ("late_grad_write.py", ["--inplace", "--set-none"], "written_after_step", "error",
     ["4 parameters", "steps 1 and 2"],
     "opt.zero_grad(set_to_none=\"--set-none\" in sys.argv)"),
    # cleared by hand, not by zero_grad (Note [A gradient cleared by hand] in
    # trace/doctor_order.py): no finding on the old code
    ("late_grad_write.py", ["--clear", "none"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad = None`", "steps 1 and 2"], "p.grad = None"),
    ("late_grad_write.py", ["--clear", "zero"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad.zero_()`", "steps 1 and 2"], "p.grad.zero_()"),
    ("late_grad_write.py", ["--inplace", "--clear", "detach"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad.zero_()`", "steps 1 and 2"], "p.grad.zero_()"),
    # ... by a zero factor or value, through `.data`, or all at once (Note [A gradient
    # cleared by hand]; Note [A gradient written through .data] in trace/doctor_probe.py):
    # no finding on the old code (`data`: a false grad_leak instead)
    ("late_grad_write.py", ["--clear", "mul"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad.mul_(0)`", "steps 1 and 2"], "p.grad.mul_(0)"),
    ("late_grad_write.py", ["--clear", "fill"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad.fill_(0)`", "steps 1 and 2"], "p.grad.fill_(0)"),
    ("late_grad_write.py", ["--clear", "data"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad.data.zero_()`", "steps 1 and 2"],
     "p.grad.data.zero_()"),
    ("late_grad_write.py", ["--clear", "foreach"], "written_after_step", "error",
     ["4 parameters", "cleared by this `torch._foreach_zero_()`", "steps 1 and 2"],
     "torch._foreach_zero_([p.grad for p in model.parameters()])"),
    # ... by a tensor of zeros, a zero tensor set as `.grad` or `.grad.data` (Note [A clear by
    # a zero tensor, a zero tensor set] in trace/doctor_order.py), and a late write through
    # `.data` in place (Note [A write through a gradient's .data]): no finding on the old code
    ("late_grad_write.py", ["--clear", "mul-tensor"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad.mul_()` by a tensor of zeros", "steps 1 and 2"],
     "p.grad.mul_(torch.zeros(()))"),
    ("late_grad_write.py", ["--clear", "imul-tensor"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad.mul_()` by a tensor of zeros", "steps 1 and 2"],
     "p.grad *= torch.tensor(0.)"),
    ("late_grad_write.py", ["--clear", "zeros-like"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad = ...` (a tensor of zeros)", "steps 1 and 2"],
     "p.grad = torch.zeros_like(p)"),
    ("late_grad_write.py", ["--clear", "times-zero"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad = ...` (a tensor of zeros)", "steps 1 and 2"],
     "p.grad = p.grad * 0"),
    ("late_grad_write.py", ["--clear", "data-set"], "written_after_step", "error",
     ["4 parameters", "cleared by this `.grad.data = ...` (a tensor of zeros)",
      "steps 1 and 2"], "p.grad.data = torch.zeros_like(p.grad)"),
    ("late_grad_write.py", ["--inplace-data"], "written_after_step", "error",
     ["4 parameters", "cleared by this zero_grad()", "steps 1 and 2"],
     "opt.zero_grad(set_to_none=\"--set-none\" in sys.argv)"),
    ("late_grad_write.py", ["--inplace-data", "--clear", "data"], "written_after_step",
     "error", ["4 parameters", "cleared by this `.grad.data.zero_()`", "steps 1 and 2"],
     "p.grad.data.zero_()"),
    ("retention.py", [], "cross_step_retention", "error", ["`total_loss`", "up from 12"],
     "total_loss += loss"),
    ("retention.py", ["--bug", "list"], "cross_step_retention", "error", ["`losses`"],
     "losses.append(loss)"),
    # a global mapping whose items() raises, met before `losses` (Note [A mapping that
    # computes its items]): the doctor stopped with an internal error (exit 70)
    ("retention.py", ["--bug", "mapping"], "cross_step_retention", "error", ["`losses`"],
     "losses.append(loss)"),
    # held deeper than a variable or one list down (Note [Who holds a retained tensor]):
    # each once "no findings"
    ("retention.py", ["--bug", "dict"], "cross_step_retention", "error", ["`history`"],
     'history["loss"].append(loss)'),
    ("retention.py", ["--bug", "tuples"], "cross_step_retention", "error", ["`records`"],
     "records.append((step, loss))"),
    ("retention.py", ["--bug", "meter"], "cross_step_retention", "error", ["`meter.sum`"],
     "self.sum += val * n"),
    ("retention.py", ["--bug", "deque"], "cross_step_retention", "error", ["`window`"],
     "window.append(loss)"),
    # a list of `dict_values` views (Note [A view of a dict's values] in trace/
    # doctor_retention.py): "no findings" on the old code; the advice detaches each tensor
    # the view holds (Note [What the line adds holds the tensors] in doctor/source.py)
    ("retention.py", ["--bug", "values"], "cross_step_retention", "error",
     ["`views`", "keep each tensor outputs holds detached instead (`tuple(x.detach() for x "
      "in outputs)`)"], "views.append(outputs)"),
    ("retention_attr.py", [], "cross_step_retention", "error", ["`seen`", "up from 10"],
     "self.seen = self.seen + out.sum(0)"),
    # a list on the model (a LightningModule's `self.outputs.append(loss)`): once unreported
    ("retention_attr.py", ["--list"], "cross_step_retention", "error", ["`kept`", "up from"],
     "self.kept.append(out.sum(0).detach() if FIXED else out.sum(0))"),
    ("eval_mode.py", [], "eval_mode", "warning", ["BatchNorm1d/Dropout", "steps 2 and 3",
                                                  "dropout is off and BatchNorm uses frozen"],
     "out = model(x)"),
    # an EMA updated outside no_grad: its parameters get a growing graph (the script once
    # crashed under the doctor; the parameters, held by the module only, went unreported)
    ("ema.py", ["--bug"], "cross_step_retention", "error",
     ["6 parameters of `ema`", "`ema.0.bias`", "steps 2 and 3", "torch.no_grad()"],
     "e.mul_(decay).add_(p, alpha=1 - decay)"),
    ("ema.py", ["--bug", "--foreach"], "cross_step_retention", "error",
     ["6 parameters of `ema`", "steps 2 and 3"], "torch._foreach_lerp_(ema_params, params, 1 - decay)"),
    ("ema.py", ["--bug", "--no-eval"], "cross_step_retention", "error",
     ["6 parameters of `ema`", "steps 2 and 3"], "e.mul_(decay).add_(p, alpha=1 - decay)"),
    # Note [A forward that takes another path in eval mode] (doctor/modes.py): a LoRA-like
    # layer merged in eval skips its factors, which got no gradient from step 2 on, unseen
    ("eval_mode.py", ["--merged"], "eval_mode", "warning",
     ["2 trainable parameters (`0.A`, `0.B`) got no gradient in steps 2 and 3",
      "call model.train()"], "opt.step()"),
    ("eval_mode.py", ["--norm-eval"], "eval_mode", "warning",
     ["BatchNorm1d/Dropout", "steps 2 and 3"], "out = model(x)"),
    # validation without no_grad and no model.train(): the training forward's call is the one
    # a backward used (Note [A validation forward under grad])
    ("eval_mode.py", ["--grad-validation"], "eval_mode", "warning",
     ["BatchNorm1d/Dropout", "steps 2 and 3"], "out = model(x)"),
    # the model's only dropout is F.dropout(..., training=self.training): once unseen; at
    # the call (the innermost line of the script's code, as for every finding)
    ("eval_mode.py", ["--functional"], "eval_mode", "warning",
     ["F.dropout in 1 modules (`1`)", "steps 2 and 3", "dropout is off; call model.train()"],
     "return F.dropout(torch.relu(self.fc(x)), 0.1, training=False if HARD_FALSE else self.training)"),
    # a student (named the model at the first step, after its teacher) left in eval mode:
    # one module, once named twice (`Sequential.3` in step 1, `3` after)
    ("two_models.py", ["--loop", "distill", "--student-eval"], "eval_mode", "warning",
     ["1 Dropout modules (`3`)", "steps 1-3: dropout is off; call"],
     "loss = F.mse_loss(student(x), target)"),
    # a teacher in eval mode, in no optimizer, run with grad: once eval_mode's "call
    # model.train()"; the waste is its gradients, the fix freezing it
    ("two_models.py", ["--loop", "distill", "--teacher-grad"], "wasted_gradients", "warning",
     ["4 parameters", "`teacher`, a network in eval mode", "steps 1-3", "requires_grad_(False)",
      "torch.no_grad()"], "target = teacher(x)"),
    # a loss network whose input's gradient is needed: freeze it, no_grad would cut it
    ("eval_mode.py", ["--fixed", "--loss-net", "--trainable-loss-net"], "wasted_gradients",
     "warning", ["4 parameters", "`loss_net`", "its input's gradient still flows"],
     "loss = loss + loss_net(out).pow(2).mean()"),
    # tensors only the garbage collector frees (Note [Tensors only the garbage collector
    # frees]): a Function's ctx attribute, an exception kept in its frame
    ("garbage.py", ["--cycle", "ctx"], "cyclic_garbage", "warning",
     ["`Double` keeps it as `ctx.out`", "64.0 KiB", "save_for_backward"], "ctx.out = out"),
    # a forward under gradients whose graph no backward used (Note [A graph no backward
    # used]): validation without no_grad, WGAN-GP's `G(z).detach()` for the critic
    ("eval_mode.py", ["--fixed", "--grad-validation"], "unused_graph", "warning",
     ["`model` (Sequential) ran 4 forwards under gradients in steps 2 and 3", "torch.no_grad()"],
     "model(torch.randn(4, 8))"),
    ("gradient_penalty.py", ["--fixed"], "unused_graph", "warning",
     ["`G` (Sequential) ran 3 forwards", "steps 1-3"], "fake = G(torch.randn(8, 4)).detach()"),
    # Note [An optimizer built again every step] (doctor/params.py): Adam's moments start
    # over at every step; built in a helper, so the step's line
    ("fresh_optimizer.py", [], "optimizer_reset", "warning",
     ["Adam's state started over in steps 2 and 3", "4 parameters", "before the loop"],
     "opt.step()"),
    # Note [The same randomness every step] (trace/doctor_rng.py): the state set back each
    # step by the seed call's line, or a generator made anew by its first draw's; a
    # validation that seeds and does not restore sets the training's draws back too
    ("rng_reset.py", ["--how", "set_rng_state"], "rng_reset", "error",
     ["steps 1-3", "the CPU generator: `torch.set_rng_state` sets it back each step"],
     "torch.set_rng_state(saved)"),
    ("rng_reset.py", ["--how", "generator"], "rng_reset", "error",
     ["steps 1-3", "(torch.randn x1 a step)", "the generator handed to torch.randn",
      "made inside the loop?"], "noise = torch.randn(8, 1, generator=gen, device=ARGS.device)"),
    ("rng_reset.py", ["--how", "validation"], "rng_reset", "error",
     ["steps 1-3", "`torch.manual_seed` sets it back"], ("torch.manual_seed(0)", 6)),
    # Note [An activation the loss applies again] (trace/doctor_losses.py): a model ending
    # in nn.Softmax trained with nn.CrossEntropyLoss; sigmoid then BCEWithLogits
    ("loss_inputs.py", ["--bug", "softmax_module"], "double_activation", "error",
     ["nn.CrossEntropyLoss (F.cross_entropy) was given the output of softmax, the model's "
      "nn.Softmax `3` (shape (8, 10)", "cannot go below 1.46 for 10 classes",
      "drop nn.Softmax `3` from the forward that trains"],
     "return criterion(out, y)"),
    ("loss_inputs.py", ["--bug", "sigmoid_bce"], "double_activation", "error",
     ["nn.BCEWithLogitsLoss (F.binary_cross_entropy_with_logits) was given the output of "
      "sigmoid", "pass the logits (drop the sigmoid)"],
     "return criterion(z if FIXED else torch.sigmoid(z), t)"),
    ("loss_inputs.py", ["--bug", "softmax_nll"], "double_activation", "error",
     ["F.nll_loss was given the output of softmax", "-p, not -log p"],
     "return F.nll_loss(F.log_softmax(out, 1) if FIXED else F.softmax(out, 1), y)"),
    # Note [A loss that broadcasts its target]: (N, 1) against (N,), and the module form
    ("loss_inputs.py", ["--bug", "l1_module"], "broadcast_target", "error",
     ["nn.L1Loss (F.l1_loss) compared an input of shape (8,) with a target of shape (8, 1)",
      "broadcast to (8, 8)", "pass target.squeeze(-1)"],
     "return criterion(pred, t if FIXED else t.unsqueeze(-1))"),
    ("loss_inputs.py", ["--bug", "huber_broadcast"], "broadcast_target", "error",
     ["F.huber_loss compared an input of shape (8, 1) with a target of shape (8,)",
      "pass input.squeeze(-1)"],
     "return F.huber_loss(out.squeeze(-1) if FIXED else out, t, delta=0.5)"),
    # Note [Values that are no log-probabilities]: nn.NLLLoss on logits, the rows of its
    # ignore_index=-1 left out (6 of 8 read); kl_div on logits
    ("loss_inputs.py", ["--bug", "nll_module"], "not_log_probs", "error",
     ["nn.NLLLoss (F.nll_loss) was given values that are no log-probabilities (shape (8, 10)",
      "unbounded below", "pass torch.log_softmax(logits, 1)"],
     "return criterion(F.log_softmax(out, 1) if FIXED else out, y)"),
    ("loss_inputs.py", ["--bug", "kl_logits"], "not_log_probs", "error",
     ["F.kl_div was given values that are no log-probabilities as its input",
      "linear in the input", "the target stays probabilities"],
     "return F.kl_div(F.log_softmax(out, -1) if FIXED else out, soft, reduction=\"batchmean\")"),
    # ... and a CTC head's loss given the frames' logits, or their softmax (once no
    # finding: ctc_loss was not watched)
    ("loss_inputs.py", ["--bug", "ctc_logits"], "not_log_probs", "error",
     ["nn.CTCLoss (F.ctc_loss) was given values that are no log-probabilities (shape "
      "(4, 2, 10): over its 10 classes", "(it reads -2.284, below 0, which CTC on "
      "log-probabilities never is)", "pass logits.log_softmax(-1)"],
     "return loss(frames.view(4, 2, C), targets, torch.tensor([4, 4]), torch.tensor([2, 1]),"),
    ("loss_inputs.py", ["--bug", "ctc_softmax"], "not_log_probs", "error",
     ["F.ctc_loss was given probabilities (shape (4, 2, 10), values in [0.0558, 0.168], each "
      "row of its 10 classes summing to 1)", "pass logits.log_softmax(-1) in place of the "
      "softmax"],
     "return loss(frames.view(4, 2, C), targets, torch.tensor([4, 4]), torch.tensor([2, 1]),"),
    ("garbage.py", ["--cycle", "frame"], "cyclic_garbage", "warning",
     ["`log_features()` and its RuntimeError's traceback", "[local 'feats']"],
     "error = str(e) if FIXED else e"),
    # Note [A gradient folded into the step's] (trace/doctor_folded.py): kept gradients
    # folded into nothing (a log), or kept by reference and zeroed in place: still drops
    # Note [Heads weighed each] (doctor/accumulation.py): heads' means summed a pass,
    # undivided over 2 micro-batches (each once no finding)
    ("two_heads.py", ["--bug"], "loss_not_divided", "warning", ["2 losses (heads)"],
     "(loss if args.bug else loss / K).backward()"),
    ("two_heads.py", ["--bug", "--heads", "3"], "loss_not_divided", "warning",
     ["3 losses (heads)"], "(loss if args.bug else loss / K).backward()"),
    # Note [A loss module of its own] (trace/doctor_probe.py): once no finding
    ("own_loss.py", ["--bug"], "loss_not_divided", "warning",
     ["2 backward passes per optimizer step on the undivided loss"],
     "(loss if BUG else loss / K).backward()"),
    *[("kept_grads.py", ["--bug", b], "dropped_update", "warning",
       ["3 of 6 backward passes made gradients that no optimizer.step() used"],
       ("loss_of().backward()", 1)) for b in ("log", "zero")],
    # Note [A statistic of a gradient carries no pass]: the first loss's norm scales the
    # second's gradient (once no finding: the norm folded the first pass in)
    ("kept_grads.py", ["--bug", "scale"], "dropped_update", "warning",
     ["3 of 6 backward passes made gradients that no optimizer.step() used"],
     ("loss_of().backward()", 1)),
    # Note [A gradient written over]: the second loss's gradients written over (`replace`
    # once no finding; `reset` once "3 of 6" for the first loss's passes, kept and folded)
    *[("kept_grads.py", ["--bug", b], "dropped_update", "warning",
       ["3 of 6 backward passes made gradients that no optimizer.step() used (their "
        "gradients were written over"], ("loss_of().backward()", 2))
      for b in ("replace", "reset")],
    # ... by values made from none of it, a plain loop (once no finding)
    *[("written_over.py", ["--write", w], "dropped_update", "warning",
       ["3 of 3 backward passes made gradients that no optimizer.step() used (their "
        "gradients were written over"],
       "nn.functional.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1)).backward()")
      for w in ("noise", "copy")],
    # Note [A loss function of its own]: once no finding
    ("own_loss.py", ["--function", "--bug"], "loss_not_divided", "warning",
     ["2 backward passes per optimizer step on the undivided loss"],
     "(loss if BUG else loss / K).backward()"),
    # Note [Segments are no heads]: once no finding (read as heads, 1/2 or 1/3 each)
    *[("segments.py", ["--bug", "--segments", n], "loss_not_divided", "warning",
       ["backpropagate 2 whole means: the weights backward gave their loss elements sum to "
        "1 in each"], "(loss if args.bug else loss / K).backward()") for n in ("2", "3")],
]


@pytest.mark.parametrize("script,args,check,severity,names,line", BUGS,
                         ids=[f"{b[0]}:{b[2]}" for b in BUGS])
def test_planted_bug_is_caught_naming_what_and_where(script, args, check, severity, names,
                                                    line):
    report = doctor(script, *args)
    # a network no optimizer trains: not eval_mode's train(); a cut: nothing but the cut
    # (a LayerNorm's parameters once also "unreached")
    if check == "wasted_gradients" or script == "cut.py":
        assert [f.check for f in report.findings] == [check]
    (f,) = [f for f in report.findings if f.check == check]
    assert f.severity == severity
    for n in names:
        assert n in f.message, (n, f.message)
    assert f.where.file == str(SCRIPTS / script)
    assert f.where.line == line_of(script, line)
    assert report.ok is False and report.steps == 3


FIXED = [("cut.py", ["--cut", c, "--fixed"]) for c in ("detach", "checkpoint")] + [
    ("optim_membership.py", ["--fixed"]), ("optim_membership.py", ["--bug", "stale", "--fixed"]),
    ("optim_membership.py", ["--bug", "copies", "--fixed"]),
    ("optim_membership.py", ["--fixed", "--unfreeze"]),
    ("master_weights.py", []),
    ("grad_leak.py", ["--fixed"]), ("grad_leak.py", ["--fixed", "--clip"]),
    ("late_grad_write.py", ["--fixed"]), ("late_grad_write.py", ["--fixed", "--inplace"]),
    ("late_grad_write.py", ["--fixed", "--clear", "none"]),
    ("late_grad_write.py", ["--fixed", "--clear", "zero"]),
    ("late_grad_write.py", ["--fixed", "--inplace", "--clear", "detach"]),
    # Note [A gradient written through .data] (trace/doctor_probe.py): `data` once a false
    # grad_leak error
    *[("late_grad_write.py", ["--fixed", "--clear", c]) for c in ("mul", "fill", "data",
                                                                  "foreach")],
    *[("grad_leak.py", ["--fixed", "--clear", c]) for c in ("data", "mul", "fill")],
    # Note [A clear by a zero tensor, a zero tensor set], Note [A gradient's .data set]
    # (`data-set`: a false grad_leak on the old code), Note [A write through a gradient's
    # .data]
    *[(script, ["--fixed", "--clear", c]) for script in ("grad_leak.py", "late_grad_write.py")
      for c in ("mul-tensor", "imul-tensor", "zeros-like", "times-zero", "data-set")],
    ("late_grad_write.py", ["--fixed", "--inplace-data"]),
    ("late_grad_write.py", ["--fixed", "--inplace-data", "--clear", "data"]),
    # Note [Every pack hook the script registers]; Note [Passes that weigh whole means]
    ("saved_hooks.py", ["--stacked", "--fixed"]),
    # Note [A gradient folded into the step's]: a loss's gradients kept and folded back
    # (each once a false dropped_update: 3 of 6 passes)
    *[("kept_grads.py", ["--fold", f]) for f in ("sum", "add", "clone", "foreach")],
    # Note [A statistic of a gradient carries no pass]: the kept gradient rescaled by norms
    # and summed; Note [A gradient written over]: written over, then both folded back
    # (`reset` once "3 of 6": the fold into a `.grad` the script set went unseen)
    ("kept_grads.py", ["--fold", "scaled"]), ("kept_grads.py", ["--fold", "reset"]),
    ("own_loss.py", ["--function"]),   # Note [A loss function of its own]
    # Note [A gradient written over]: values made from the gradient, or the gradient
    *[("written_over.py", ["--write", w]) for w in ("half", "view")],
    # Note [Segments are no heads]: divided
    ("segments.py", []), ("segments.py", ["--segments", "3"]),
    ("helper_accum.py", []), ("helper_accum.py", ["--whole"]),
    ("helper_accum.py", ["--whole", "--bug"]), ("helper_accum.py", ["--mean"]),
    # two heads' means on one batch, divided: 1 a pass, no whole means (one target tensor)
    ("helper_accum.py", ["--heads"]),
    # Note [Heads weighed each]: heads on targets of their own, divided (the two once "2
    # whole means")
    ("two_heads.py", []), ("two_heads.py", ["--heads", "3"]),
    ("own_loss.py", []),   # Note [A loss module of its own]
    ("accumulation.py", ["--fixed"]), ("retention.py", ["--fixed"]),
    ("accumulation.py", ["--fixed", "--none"]),   # Note [A loss reduced after the call]
    # Note [A state carried in from an earlier step] (doctor/graph.py): a cut_graph error
    # for `h0` at the detach that starts step 2, before
    ("carried.py", ["--cell", "gru", "--learned", "--fixed"]),
    # micro-batch sums, undivided: the step's sum (once a loss_not_divided warning)
    ("accumulation.py", ["--fixed", "--sum"]),
    # the same sum asked for the deprecated way (size_average=False decides over
    # `reduction`): once read as a mean, a loss_not_divided and a token_denominator warning
    # (Note [A reduction however it was passed] in trace/doctor_losses.py)
    *[("accumulation.py", ["--fixed", "--sum", "--how", h])
      for h in ("legacy", "positional", "module")],
    ("retention_attr.py", ["--fixed"]), ("eval_mode.py", ["--fixed"]),
    ("eval_mode.py", ["--fixed", "--frozen-bn"]),   # frozen on purpose: eval, no gradient
    # a BatchNorm put in eval on its own after model.train(), its affine parameters
    # training (mmdetection's norm_eval): once an eval_mode warning
    ("eval_mode.py", ["--fixed", "--norm-eval"]),
    ("eval_mode.py", ["--functional", "--fixed"]),
    ("eval_mode.py", ["--merged", "--fixed"]),
    ("eval_mode.py", ["--functional", "--fixed", "--hard-false"]),   # off on purpose
    ("eval_mode.py", ["--fixed", "--loss-net"]),    # a frozen loss network: no gradient
                                                    # reaches it (its Dropout once warned)
    # validation in eval without torch.no_grad(), then model.train(): no backward used those
    # calls (once an eval_mode warning: Note [A validation forward under grad])
    ("eval_mode.py", ["--fixed", "--grad-validation"]),
    ("eval_mode.py", ["--functional", "--fixed", "--grad-validation"]),
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
    # ... and a frozen parameter in LBFGS, written with its own values (once frozen_moving)
    ("closure.py", ["--lbfgs", "--frozen", "--fixed"]),
    ("closure.py", ["--clip", "after", "--fixed"]), ("retention_attr.py", ["--list", "--fixed"]),
    # fused AdamW bumps no version counter: its updates once read as no_update
    ("fused_adamw.py", []), ("fused_adamw.py", ["--warmup"]),
    # modules chosen by the data: unrouted MoE experts, an auxiliary head every other step
    # (once unused_parameter warnings)
    ("moe.py", []), ("moe.py", ["--aux"]),
    ("param_slots.py", []),
    ("early_return.py", []),
    # SAM: the first gradient moves the weights (the ascent) and is zeroed; no step uses
    # it (once a dropped_update warning)
    ("sam.py", []),
    # cooper's extragradient: two backward passes (the model's, the multiplier's), then both
    # moved along their gradients through `p.data` (or in place) and zeroed: Note [Moves of
    # several backward passes, through .data] (once "5 of 12 backward passes", "3 of 12")
    ("extragradient.py", []), ("extragradient.py", ["--in-place"]),
    # an optimizer that runs backward itself after a closure that returns the loss
    # (torchmin's Minimizer): Note [A closure that leaves backward to the optimizer] (once
    # zeroed_before_step "in steps 2 and 3")
    ("own_backward.py", []), ("own_backward.py", ["--no-hvp"]),
    # weights moved between two accumulated backward passes, no gradient read between
    ("weight_noise.py", []),
    # gradients taken without a graph on purpose: first-order MAML's fast weights, a norm
    # logged; and WGAN-GP with create_graph=True
    ("gradient_penalty.py", ["--fixed"]), ("gradient_penalty.py", ["--first-order"]),
    ("gradient_penalty.py", ["--fixed", "--log-norm"]),
    # an EMA of an evaluation's penalty taken without a graph, `.detach()`ed into the next
    # penalty: once a dead_penalty error (Note [A gradient penalty without create_graph],
    # rule 2: an explicit detach ends the watch)
    ("gradient_penalty.py", ["--fixed", "--smooth"]),
    # correct loops whose patterns look like bugs (see the script's docstring)
    *[("styles.py", ["--loop", lp]) for lp in ("tbptt", "rl", "gp", "queue", "groups",
                                                 "topzero", "maml", "gan", "fgsm",
                                                 "multitask")],
    # an EMA copy under no_grad (a loop, _foreach_lerp_), SWA's AveragedModel
    ("ema.py", []), ("ema.py", ["--foreach"]), ("ema.py", ["--swa"]),
    # every gradient exactly zero as backward computed it (a hinge whose margins are met)
    # once read as zeroed_before_step
    ("custom_function.py", ["--hinge"]),
    # the same clipped in place before an Adam step (Note [Zero as backward left it]): once
    # read as zeroed_before_step, then as no_update
    ("custom_function.py", ["--hinge", "--clip"]),
    # sparse gradients: the probe's `.any()` and `isfinite` once crashed the script
    ("sparse_embedding.py", []),
    # an activation torch.jit.trace'd at set-up: its check run once failed under the probe
    ("jit_traced.py", []),
    # one step per backward, K backward passes then one step
    ("double_step.py", ["--bug", "copy", "--fixed"]),
    ("double_step.py", ["--bug", "accum", "--fixed"]),
    # clip between backward and step: after 2 micro-batches, after scaler.unscale_, and a
    # clip_grad_norm_(..., inf) after the step that only reads the norm for logging
    ("clip_order.py", ["--fixed"]), ("clip_order.py", ["--fixed", "--accum", "2", "--log-norm"]),
    ("clip_order.py", ["--bug", "scaler", "--fixed", "--log-norm"]),
    *[("garbage.py", ["--cycle", c, "--fixed"]) for c in ("ctx", "frame", "module",
                                                           "snapshot", "held")],
    ("retained.py", ["--fixed"]), ("retained.py", ["--twice"]),
    # a GAN's d_loss retained for the generator's backward through the same G graph, with
    # D's step between (Note [A retained graph another optimizer's backward used])
    ("retained.py", ["--gan"]),
    # seeded once, a new seed a step, a seeded validation under fork_rng or restored by
    # hand, checkpoint's re-run, nothing drawn, a sample drawn and the state put back, a
    # no_grad validation seeded each step
    # (Note [The same randomness every step] in trace/doctor_rng.py)
    ("rng_reset.py", ["--fixed"]), ("rng_reset.py", ["--fixed", "--how", "generator"]),
    *[("rng_reset.py", ["--form", f]) for f in (
        "step_seed", "fork_rng", "restore", "checkpoint", "no_draws", "peek", "eval_seed")],
    ("fresh_optimizer.py", ["--fixed"]), ("fresh_optimizer.py", ["--opt", "sgd"]),
    # Note [An optimizer's id, taken again]: a new optimizer at a dead one's address
    ("fresh_optimizer.py", ["--opt", "sgd", "--keep-last"]),
    ("fresh_optimizer.py", ["--unfreeze"]),
    # the loss given what it takes, and correct forms near the two loss bugs (Note [An
    # activation the loss applies again], Note [A loss that broadcasts its target])
    ("loss_inputs.py", ["--bug", "softmax_ce", "--fixed"]),
    ("loss_inputs.py", ["--bug", "mse_broadcast", "--fixed"]),
] + [("loss_inputs.py", ["--form", f]) for f in (
    "distill", "soft_targets", "smoothing", "log_nll", "log_ce", "log_probs", "bce",
    "row_target", "scalar_target", "pairwise", "lm", "eval",
    # Note [Values that are no log-probabilities]: inputs that are no log_softmax yet no
    # logits, or whose logits the script normalises itself (hand_ce: once named before
    # the logsumexp was watched; nll_ignore: its padding rows hold 3.0)
    "nll_subset", "nll_logsigmoid", "nll_gather", "hand_ce", "hand_ce_lse_first",
    "nll_ignore", "nll_weighted", "nll_bf16", "nll_mixture", "kl_log_target", "kl_none_sum",
    "kl_pointwise",
    # Note [A reduction however it was passed]: reduce=False is 'none' (a pairwise
    # difference: once broadcast_target), size_average=False 'sum' (no kl_div_mean)
    "pairwise_legacy", "pairwise_positional", "kl_legacy_sum", "kl_positional",
    # CTC on log_softmax, per utterance ('none' is read too) and in bfloat16
    "ctc", "ctc_bf16")] + [
] + [("loss_inputs.py", ["--bug", b, "--fixed"]) for b in (
    "nll_logits", "nll_module", "kl_probs", "kl_logits", "kl_mean", "ctc_logits",
    "ctc_softmax")] + [
] + [("updates.py", ["--bug", b, "--fixed"]) for b in ("scaler", "sched")] + [
    ("second_order.py", []),   # Note [A step that finds its own direction]: once no_gradient
    # Note [Gradients an optimizer takes outside its step]: once dropped_update
    ("hessian_refresh.py", []), ("hessian_refresh.py", ["--bug", "keep", "--no-grad"]),
]   # updates.py with --fixed:
# nonfinite and zeroed run the very loop of sched (the bug flags only pick the bug)


# fixed for their own check, and a forward whose graph no backward used besides: that
# finding is a row of BUGS (validation without no_grad, `G(z).detach()` for the critic)
UNUSED_GRAPH = {("eval_mode.py", "--fixed --grad-validation"),
                ("eval_mode.py", "--functional --fixed --grad-validation"),
                ("gradient_penalty.py", "--fixed"), ("gradient_penalty.py", "--fixed --log-norm"),
                ("gradient_penalty.py", "--fixed --smooth"), ("styles.py", "--loop gp")}


@pytest.mark.parametrize("script,args", FIXED, ids=[f"{s}:{' '.join(a)}" for s, a in FIXED])
def test_the_same_script_fixed_has_no_finding(script, args):
    report = doctor(script, *args)
    expected = {"unused_graph"} if (script, " ".join(args)) in UNUSED_GRAPH else set()
    assert {f.check for f in report.findings} == expected, report.findings


def test_models_rebuilt_every_step_reuse_the_ids_of_the_dropped_ones():
    """Note [Parameters held weakly]: the probe forgets a dead parameter's state before a
    new one may take its id (a stale entry once read a new parameter as hooked: "got no
    gradient", then KeyError at optimizer.step())."""
    report = doctor("rebuilt.py", steps=8)
    assert (report.steps, report.findings) == (8, [])


def test_exact_message_of_rng_reset():
    """torch.manual_seed(0) at the top of each step: randn noise, then two dropouts."""
    (f,) = doctor("rng_reset.py").findings
    assert f.where.line == line_of("rng_reset.py", ("torch.manual_seed(0)", 5))
    assert f.message == (
        "steps 1-3 drew their random numbers (torch.randn x1, F.dropout x2 a step) from the "
        "same state of the CPU generator: `torch.manual_seed` sets it back each step, so "
        "every step draws the same dropout masks, noise and random indices and the model "
        "trains on one draw; seed once before the loop, seed with the step "
        "(manual_seed(base + step)), or put the block that needs fixed randomness under "
        "torch.random.fork_rng()")
    draw = line_of("rng_reset.py", "noise = torch.randn(8, 1, device=ARGS.device)")
    assert f.evidence == {"steps": [1, 2, 3], "generator": "cpu",
                          "ops": {"torch.randn": 1, "F.dropout": 2},
                          "reset": "torch.manual_seed",
                          "first_draw": f"{SCRIPTS / 'rng_reset.py'}:{draw}"}


def test_rng_reset_with_the_seed_in_the_middle_of_a_step():
    """`--steps-by forward` ends a step at the forward, after the seed and the noise: the
    step's first draw (dropout) finds the state its end finds, yet its draws moved it (read
    around the draw: Note [The same randomness every step])."""
    report, outcome = diagnose_in_process(SCRIPTS / "rng_reset.py", [], 3, "forward")
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.evidence["steps"], f.evidence["reset"]) == (
        "rng_reset", [1, 2], "torch.manual_seed")
    assert f.where.line == line_of("rng_reset.py", ("torch.manual_seed(0)", 5))


def test_reentrant_checkpoint_replays_its_dropout_without_rng_reset():
    """torch's reentrant checkpoint sets the state back for its re-run inside fork_rng and
    inside backward: no rng_reset (Note [The same randomness every step])."""
    assert "rng_reset" not in {f.check for f in doctor("rng_reset.py", "--form",
                                                       "reentrant").findings}


def test_exact_message_of_a_double_step():
    (f,) = [f for f in doctor("double_step.py", "--bug", "copy").findings]
    first = line_of("double_step.py", ("opt.step()", 2))
    assert f.message == (
        f"optimizer.step() (AdamW) ran 2 times on the gradients of one backward pass in step 2 "
        f"(line {first} had stepped them already): 4 parameters (`0.weight`, `0.bias`, "
        "`2.weight` and 1 more) got the same update 2 times; call step() once per backward "
        "(once after the accumulation loop)")
    assert f.evidence == {"optimizer": "AdamW", "steps_per_backward": 2, "steps": [2],
                          "params": 4, "first_step_line": first}


def test_exact_message_of_a_dead_penalty():
    (f,) = [f for f in doctor("gradient_penalty.py", "--bug").findings
            if f.check == "dead_penalty"]
    grad = line_of("gradient_penalty.py", "grad, = torch.autograd.grad(D(mixed).sum(), mixed)")
    add = line_of("gradient_penalty.py", "loss_d = D(fake).mean() - D(real).mean() + 10 * penalty")
    bw = line_of("gradient_penalty.py", ("loss_d.backward()", 1))
    assert f.message == (
        f"a loss term made from torch.autograd.grad() without create_graph=True (line {grad}) "
        f"was added to the loss at line {add} and backpropagated at line {bw}, in steps 1-3: "
        "the gradients carry no history, so the term changes the loss's value and trains "
        "nothing (a gradient penalty); pass create_graph=True to torch.autograd.grad()")
    assert f.evidence == {"backward_passes": 3, "steps": [1, 2, 3], "add_line": add,
                          "backward_line": bw}


def test_exact_numbers_of_cyclic_garbage():
    """Each step's Function output (64x256 float32 = 65,536 B) stays until the next step's
    boundary; a best-model copy of 2 x (256x256 + 256) float32 parameters (526,336 B), its
    forward hook a bound method of its own, replaced each step."""
    (ctx,) = doctor("garbage.py", "--cycle", "ctx").findings
    assert ctx.evidence == {
        "steps": [2, 3], "bytes": 65536, "tensors": 1, "bytes_per_step": [65536, 65536],
        "kind": "ctx", "structures": 1,
        "cycle": "Tensor(64x256 float32) → .grad_fn DoubleBackward → .out "
                 "Tensor(64x256 float32)"}
    assert ctx.message.startswith(
        "1 tensor (64.0 KiB) no longer reachable was still in memory at the end of steps 2 and 3: "
        "the custom autograd.Function `Double` keeps it as `ctx.out`, and ctx is the grad_fn "
        "of what it keeps: a reference cycle (")
    (mod,) = doctor("garbage.py", "--cycle", "module").findings
    assert (mod.check, mod.evidence["bytes"], mod.evidence["tensors"]) == (
        "cyclic_garbage", 2 * (256 * 256 + 256) * 4, 4)
    assert "a dropped `Net` that refers back to itself" in mod.message
    assert mod.evidence["cycle"].startswith("Net → ._forward_hooks → ")
    # a copy that ran (under no_grad): its parameters, which the probe once kept (Note
    # [Parameters held weakly]), are garbage with it; each step's copy, found at the next
    # boundary
    # Note [A cycle a collection saw before its tensors] (trace/doctor_garbage.py): a
    # collection in the middle of each step finds the dict's cycle while the helper still
    # holds its tensor; the boundary finds the tensor, and walks the cycle described
    # already for the path (was: "cycle": "", "a reference cycle of objects holds it")
    (held,) = doctor("garbage.py", "--cycle", "held").findings
    assert (held.check, held.evidence["steps"], held.evidence["bytes_per_step"]) == (
        "cyclic_garbage", [1, 2, 3], [65536] * 3)
    assert held.evidence["cycle"] == "dict → ['self'] → ['feats'] Tensor(64x256 float32)"
    (snap,) = doctor("garbage.py", "--cycle", "snapshot").findings
    assert (snap.evidence["steps"], snap.evidence["bytes_per_step"]) == (
        [2, 3], [2 * (256 * 256 + 256) * 4] * 2)


def test_garbage_a_collection_freed_mid_step_is_seen():
    """The script's own gc.collect() right after the helper frees the frame's cycle in the
    step (one of Python's collections in the middle of a step, read as it runs)."""
    (f,) = doctor("garbage.py", "--cycle", "frame", "--collect").findings
    assert f.message.startswith(
        "1 tensor (64.0 KiB) no longer reachable stayed in memory until one of Python's "
        "garbage collections in steps 1-3 freed it: the frame of `log_features()` and its "
        "RuntimeError's traceback hold it")   # `feats`; the argument, `out`, is the script's
    assert f.evidence["bytes_per_step"] == [65536] * 3
    assert f.where.line == line_of("garbage.py", "error = str(e) if FIXED else e")


def test_exact_messages_of_clip_order():
    names = "4 parameters (`0.weight`, `0.bias`, `2.weight` and 1 more)"
    (before,) = doctor("clip_order.py", "--bug", "before").findings
    assert before.message == (
        "clip_grad_norm_() ran before the backward() that filled the gradients it should "
        f"clip, in steps 2 and 3: optimizer.step() used the gradients of {names} unclipped; "
        "call it after backward(), just before optimizer.step()")
    (after,) = doctor("clip_order.py", "--bug", "after").findings
    assert after.message == (
        "clip_grad_norm_() ran after optimizer.step() had used the gradients, in steps 1 and 2: "
        f"the step used the gradients of {names} unclipped; call it between backward() and "
        "optimizer.step()")
    # the clip after step 3 never runs: the doctor stops the script at the end of step 3
    (scaled,) = doctor("clip_order.py", "--bug", "scaler").findings
    # GradScaler's initial scale 2**16: max_norm 1.0 acts as 1 / 65536 = 1.53e-05
    assert scaled.message == (
        f"clip_grad_norm_() clipped the gradients of {names} while still multiplied by the "
        "GradScaler's scale (65536), in steps 1-3: max_norm=1 acts as 1.53e-05 on the true "
        "gradients; call scaler.unscale_(optimizer) before clipping")
    assert scaled.evidence == {"order": "scaled", "function": "clip_grad_norm_", "params": 4,
                               "steps": [1, 2, 3], "scale": 65536.0, "limit": 1.0}



def test_a_clip_after_the_step_is_clip_orders_alone():
    """A clip after the step writes the gradients a zero_grad then clears: check 8 says it
    as `clip_order`, and `written_after_step` leaves it (Note [A gradient written after the
    step] in trace/doctor_order.py)."""
    report = doctor("late_grad_write.py", "--clip-after")
    assert [f.check for f in report.findings] == ["clip_order"]


# optimizer.step() more than once per backward, legitimately: a backbone and a head
# optimizer, a GAN's two, K backward passes then one step, GradScaler skipping a step on
# inf gradients (its dropped_update warning is the only finding), LBFGS's closure running
# backward inside step(); and a clip after the last of 2 micro-batches
STEPPING = [("two_models.py", ["--loop", "heads"], []), ("two_models.py", ["--loop", "gan"], []),
            ("grad_leak.py", ["--fixed"], []),
            ("double_step.py", ["--bug", "accum", "--fixed"], []),
            ("updates.py", ["--bug", "scaler"], ["dropped_update"]),
            # the scheduler once per scaler.step(), two of them skipped: on time (once also
            # a scheduler_rate warning, "5 times for 3 optimizer steps")
            ("updates.py", ["--bug", "scaler2"], ["dropped_update", "scheduler_order"]),
            # some gradients dropped on purpose before the step (once zeroed_before_step)
            ("updates.py", ["--bug", "lastlayer"], []),
            ("closure.py", ["--lbfgs", "--fixed"], []),
            ("clip_order.py", ["--fixed", "--accum", "2"], [])]


@pytest.mark.parametrize("script,args,checks", STEPPING,
                         ids=[f"{s}:{' '.join(a)}" for s, a, _ in STEPPING])
def test_legitimate_step_patterns_are_not_double_steps(script, args, checks):
    assert [f.check for f in doctor(script, *args).findings] == checks


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


@pytest.mark.parametrize("script", ["hf_gpt2.py", "hf_lora.py", "hf_trainer.py"])
def test_no_false_positive_on_transformers_and_peft_loops(script):
    for pkg in ("transformers", "peft"):
        if importlib.util.find_spec(pkg) is None:
            pytest.skip(f"{pkg} is not installed (pip install '.[dev]')")
    report = doctor(script)
    assert [f.line() for f in report.findings] == []


def test_functional_dropout_of_a_transformers_model_left_in_eval_mode():
    """BART's dropout is all `nn.functional.dropout(..., training=self.training)`: the model
    left in eval read "no findings" (the rule saw nn.Dropout modules only)."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed (pip install '.[dev]')")
    assert doctor("hf_bart.py").findings == []
    (f,) = doctor("hf_bart.py", "--eval").findings
    assert (f.check, f.severity) == ("eval_mode", "warning")
    assert "F.dropout in 4 modules (`model.decoder`, `model.decoder.layers.0`" in f.message
    assert f.where.line == line_of("hf_bart.py", "out = model(input_ids=ids, labels=ids)")


def test_the_report_says_which_steps_its_findings_number():
    """A GAN's two optimizers step twice a training step: the header said "in 3 steps" over a
    finding in "step 4" (findings number optimizer.step() calls). The report now says both."""
    gan, mlp = doctor("two_models.py", "--loop", "gan"), doctor("grad_leak.py", "--fixed")
    # the generator's step, then the discriminator's, per iteration; the doctor stops as the
    # third training step ends, with the fifth call
    assert gan.steps == 3 and gan.optimizer_steps == 5
    assert gan.steps_text() == "3 steps (5 optimizer steps, as the findings number them)"
    assert (mlp.steps, mlp.optimizer_steps, mlp.steps_text()) == (3, 3, "3 steps")


def test_a_tensor_kept_by_a_module_of_the_project_is_named_there():
    """`from retention_log import log_loss`: the list is a global of the project's own module,
    which no frame of the script names (Note [Who holds a retained tensor])."""
    (f,) = doctor("retention.py", "--bug", "module").findings
    assert (f.check, f.severity) == ("cross_step_retention", "error")
    assert "`LOSSES`" in f.message
    assert f.where.file == str(SCRIPTS / "retention_log.py")
    assert f.where.line == line_of("retention_log.py", "LOSSES.append(loss)")


@pytest.mark.parametrize("cell,names,line", [
    ("gru", ["h"], "out, h = rnn(x, start(h))"),
    ("lstm", ["hidden[0]", "hidden[1]"], "out, hidden = rnn(x, hidden)"),
    ("cell", ["state"], "state = rnn(x[:, t], state)"),
    # the state as a `dict_values` view (Note [A view of a dict's values]): torch's words
    # alone on the old code
    ("values", ["view[0]", "view[1]"], "out, view = lstm_step(x, view)"),
    # the loss smoothed by an EMA kept undetached in a dict: `loss` (the backward's root,
    # `loss = 0.5 * loss + ...`) was named on the old code, told to `loss = loss.detach()`
    # (Note [The value backwarded carries nothing])
    ("smooth", ["smooth['loss']"], 'smooth["loss"] = loss.detach() if ARGS.fixed else loss')])
def test_a_state_carried_into_a_failed_backward_is_named(cell, names, line):
    """Note [A variable that carried the graph into a failed backward] (trace/
    doctor_retention.py): without `h = h.detach()` step 2's backward runs into step 1's
    freed graph and the script dies before the boundary that would name `h`; the doctor
    said torch's words alone. Now the failure's finding names the variable whose value
    carried the graph across, by the edge the failing graph entered the old one through
    (step 2's `out` reaches it too, through `h`), at the line that feeds it back."""
    report, outcome = diagnose_in_process(SCRIPTS / "carried.py", ["--cell", cell], 3)
    assert outcome.code == 3 and "backward through the graph a second time" in outcome.reason
    (f,) = report.findings
    var = names[0].split("[")[0]
    assert (f.check, f.severity, f.evidence["steps"], f.evidence["names"]) == (
        "cross_step_retention", "error", [2], names)
    assert f.evidence["bytes_per_step"] == [4] if cell == "smooth" else \
        [len(names) * 4 * 16 * 4]   # (1,)4x16 float32; the smoothed loss a 0-dim float32
    if cell == "smooth":
        assert f.message.endswith("(each tensor it holds, `smooth[k] = smooth[k].detach()` "
                                  "for each key k)")
    assert f.message.startswith(f"`{var}`")
    assert "carried step 1's autograd history into step 2, whose backward then failed " \
           "(Trying to backward through the graph a second time" in f.message
    assert f.where.line == line_of("carried.py", line)
    report = doctor("carried.py", "--cell", cell, "--fixed")
    assert report.findings == []


def test_trace_of_a_carried_state_points_at_the_doctor(tmp_path):
    # the trace fails as the script does, keeps its partial ledger, and says which verb
    # names the carrier (Note [A variable that carried the graph into a failed backward])
    from memledger.errors import ScriptError
    from memledger.trace.session import trace_script

    with pytest.raises(ScriptError) as e:
        trace_script(SCRIPTS / "carried.py", ["--cell", "gru"], tmp_path / "c.ledger",
                     steps=3, measure=False)
    assert e.value.exit_code == 3
    assert str(e.value).endswith(
        f"; the partial ledger is kept at {tmp_path / 'c.ledger'}; if a step's forward reads "
        "what the last step computed (a hidden state not detached), `memledger doctor` on "
        "the script names it")


def test_a_graph_kept_by_retain_graph_is_named_with_its_bytes():
    """Note [A graph kept by retain_graph] (trace/doctor_retention.py): `loss.backward(
    retain_graph=True)` with no second backward keeps the graph's saved tensors until the
    next step binds `loss` again: the input (64x256), the ReLU's output (64x1024, saved
    once for ReLU and the second Linear) and the output `pow` saves (64x10), float32:
    65,536 + 262,144 + 2,560 = 330,240 B, the weights aside; the doctor said nothing."""
    (f,) = doctor("retained.py").findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning")
    assert f.evidence == {"steps": [1, 2, 3], "kept_bytes_per_step": [330_240] * 3}
    assert f.message.startswith(
        "`loss` keeps the 322.5 KiB of tensors its graph saved for backward past the step's "
        "end (at the end of steps 1-3, across optimizer steps): its "
        "backward(retain_graph=True) kept them and no later backward used them")
    assert f.where.line == line_of("retained.py", ("loss.backward(retain_graph=True)", 3))
    # the last head's backward retains the trunk's saves as well (the head's output is
    # 64x4 here: 65,536 + 262,144 + 1,024 B)
    (h,) = doctor("retained.py", "--heads").findings
    assert h.evidence == {"steps": [1, 2, 3], "kept_bytes_per_step": [328_704] * 3}
    assert "the step's last backward kept them with retain_graph=True, which the earlier " \
           "ones on the same forward needed and it does not" in h.message
    assert h.where.line == line_of("retained.py", ("loss.backward(retain_graph=True)", 1))
    # saved-tensor hooks on at the forward (the script's own here; the collector's under
    # `doctor -o`): reading a saved tensor would run their unpack, so the bytes are not read
    import torch

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        rep, outcome = diagnose_in_process(SCRIPTS / "retained.py", [], 3)
    (g,) = rep.findings
    assert "`loss` keeps the tensors its graph saved for backward (not read: saved-tensor " \
           "hooks were on)" in g.message and g.evidence["kept_bytes_per_step"] == []


@pytest.mark.parametrize("cut,line,what", [
    ("no_grad", "return model(x)", "an op under `torch.no_grad()`"),
    ("detach", "return model(x).detach()", "`.detach()`")])
def test_a_loss_with_no_history_says_where_it_was_cut(cut, line, what):
    """Note [A loss with no history] (doctor/graph.py): the whole forward under no_grad, or
    its output detached, and backward raises at once; the doctor said torch's words alone.
    The failure's finding names the cut, at its line, and the parameters behind it."""
    report, outcome = diagnose_in_process(SCRIPTS / "no_history.py", ["--cut", cut], 3)
    assert outcome.code == 3 and "does not require grad" in outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("cut_graph", "error")
    assert f.where.line == line_of("no_history.py", (line, 1))
    assert f.message.startswith(
        f"the loss backward() was called on at line {line_of('no_history.py', 'loss.backward()')}"
        " has no autograd history, so backward raised (element 0 of tensors does not require "
        f"grad and does not have a grad_fn): the forward reached the parameters only through "
        f"{what}")
    assert f.evidence == {"window": 1, "params_without_grad": 4}
    assert doctor("no_history.py", "--fixed").findings == []


def test_retained_graphs_summed_into_another_variable_are_counted_and_it_is_named():
    """Note [Other variables that hold a retained graph] (trace/doctor_retention.py): two
    micro-batches retained and summed into `total`: both graphs stay (2 x 330,240 B), and
    `del loss` alone would free nothing; it said 322.5 KiB and `del loss`."""
    (f,) = doctor("retained.py", "--sum").findings
    assert f.evidence == {"steps": [1, 2, 3], "kept_bytes_per_step": [660_480] * 3,
                          "also": ["total"]}
    assert f.message.startswith("`loss` (and `total`, which holds it too) keep the 645.0 KiB")
    assert "`del loss, total`" in f.message
    assert f.where.line == line_of("retained.py", ("loss.backward(retain_graph=True)", 4))


def test_a_retained_graph_no_later_backward_used_is_named_across_two_optimizers():
    """Note [A retained graph another optimizer's backward used]: the GAN whose generator
    loss runs on a new G forward never uses the graph d_loss retained; judged when G's
    step takes the last of its parameters (`--gan` alone: no finding)."""
    (f,) = doctor("retained.py", "--gan", "--regenerate").findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning")
    assert f.message.startswith("`d_loss` keeps the 29.5 KiB of tensors its graph saved")
    assert f.evidence["kept_bytes_per_step"] == [30_208] * len(f.evidence["steps"])
    assert f.where.line == line_of("retained.py", ("d_loss.backward(retain_graph=True)", 1))
    # a trainable layer no optimizer holds in the graph: no step will take it, so nothing
    # to wait for (its other findings aside)
    (e,) = [f for f in doctor("retained.py", "--extra").findings
            if f.check == "cross_step_retention"]
    assert e.evidence["steps"] == [1, 2, 3]


def test_exact_findings_of_the_two_loss_bugs():
    """The functional forms, every number of the evidence: softmax then cross_entropy
    (its floor on probabilities of 10 classes, log(e + 9) - 1), and mse on (8, 1) against
    (8,), the loss on matching shapes beside the one computed."""
    (ce,) = doctor("loss_inputs.py", "--bug", "softmax_ce").findings
    assert (ce.check, ce.severity, ce.where.line) == (
        "double_activation", "error",
        line_of("loss_inputs.py", "return F.cross_entropy(probs, y)"))
    assert ce.message.startswith(
        "F.cross_entropy was given the output of softmax (shape (8, 10), values in "
        "[0.0558, 0.168], each row of its 10 classes summing to 1) in steps 1-3: "
        "cross_entropy applies log_softmax to its input itself, so the softmax runs twice")
    assert ce.evidence == {"loss": "cross_entropy", "module": "", "op": "softmax",
                           "steps": [1, 2, 3], "calls": 3, "shape": [8, 10], "min": 0.0558,
                           "max": 0.1684, "classes": 10, "floor": 1.4612, "value": 2.2974}
    (mse,) = doctor("loss_inputs.py", "--bug", "mse_broadcast").findings
    assert (mse.check, mse.severity, mse.where.line) == (
        "broadcast_target", "error",
        line_of("loss_inputs.py", "return F.mse_loss(out.squeeze(-1) if FIXED else out, t)"))
    assert mse.message == (
        "F.mse_loss compared an input of shape (8, 1) with a target of shape (8,) in steps "
        "1-3: they broadcast to (8, 8), every prediction against every target, so the model "
        "learns toward the batch's mean (it reads 0.5953; on matching shapes 0.5283); pass "
        "input.squeeze(-1) (or target.unsqueeze(-1)) so the shapes match")
    assert mse.evidence == {"loss": "mse_loss", "module": "", "input": [8, 1], "target": [8],
                            "broadcast": [8, 8], "steps": [1, 2, 3], "calls": 3,
                            "value": 0.5953, "meant": 0.5283}


def test_exact_findings_of_the_log_probability_losses():
    """Note [Values that are no log-probabilities] and Note [kl_div's reduction='mean']
    (trace/doctor_losses.py), every number: nll_loss on a Linear's logits (the rows'
    logsumexp, the largest value, the negative loss), kl_div on probabilities that no
    softmax node made (`log_probs.exp()`), nn.KLDivLoss's default 'mean' (10x below
    'batchmean' for 10 classes)."""
    (nll,) = doctor("loss_inputs.py", "--bug", "nll_logits").findings
    assert (nll.check, nll.severity, nll.where.line) == (
        "not_log_probs", "error",
        line_of("loss_inputs.py", "return F.nll_loss(F.log_softmax(out, 1) if FIXED else out, y)"))
    assert nll.message == (
        "F.nll_loss was given values that are no log-probabilities (shape (8, 10): over its "
        "10 classes the rows' logsumexp ranges over [2.25, 2.56], not 0, and values reach "
        "0.596, where log-probabilities are <= 0) in steps 1-3: nll_loss takes "
        "log-probabilities and returns minus the target's value, so on logits it is "
        "unbounded below and training drives the targets' logits to +inf (it reads -0.0912, "
        "below 0, which nll_loss on log-probabilities never is); pass "
        "torch.log_softmax(logits, 1), or the logits to F.cross_entropy")
    assert nll.evidence == {"loss": "nll_loss", "module": "", "kind": "logits",
                            "steps": [1, 2, 3], "calls": 3, "shape": [8, 10], "classes": 10,
                            "rows": 8, "lse_min": 2.253, "lse_max": 2.564, "min": -0.5834,
                            "max": 0.5958, "value": -0.0912}
    (kl,) = doctor("loss_inputs.py", "--bug", "kl_probs").findings
    assert (kl.check, kl.severity, kl.where.line) == (
        "not_log_probs", "error",
        line_of("loss_inputs.py", "return F.kl_div(student, soft, reduction=\"batchmean\")"))
    assert kl.message == (
        "F.kl_div was given probabilities as its input (shape (8, 10), values in [0.0752, "
        "0.131], each row of its 10 classes summing to 1) in steps 1-3: kl_div takes "
        "log-probabilities as its input and computes sum target * (log target - input): on "
        "probabilities that is no divergence (it reads -2.344, below 0, which a KL "
        "divergence never is), and the model trains toward another quantity; pass "
        "log-probabilities as the input: torch.log_softmax(logits, 1) (or torch.log(probs) "
        "if only the probabilities exist); the target stays probabilities")
    assert kl.evidence == {"loss": "kl_div", "module": "", "kind": "probabilities",
                           "steps": [1, 2, 3], "calls": 3, "shape": [8, 10], "classes": 10,
                           "rows": 8, "min": 0.0752, "max": 0.1309, "row_sum_error": 0.0,
                           "value": -2.344, "target": "probabilities", "log_target": False}
    (mean,) = doctor("loss_inputs.py", "--bug", "kl_mean").findings
    assert (mean.check, mean.severity, mean.where.line) == (
        "kl_div_mean", "warning",
        line_of("loss_inputs.py", "return criterion(F.log_softmax(out / 2.0, -1), soft) * 4.0"))
    assert mean.message == (
        "nn.KLDivLoss (F.kl_div) with reduction='mean' divided the summed KL by all 80 "
        "elements of its input (shape (8, 10)), not by the batch's 8, in steps 1-3: it reads "
        "0.00645, 1/10 of the 0.0645 that 'batchmean' gives, so its gradient is 10x smaller "
        "against any other term; pass reduction='batchmean' ('mean' is no KL divergence: "
        "torch's docs)")
    assert mean.evidence == {"loss": "kl_div", "module": "nn.KLDivLoss", "steps": [1, 2, 3],
                             "calls": 3, "shape": [8, 10], "classes": 10, "elements": 80,
                             "batch": 8, "value": 0.00645, "batchmean": 0.0645,
                             "target": "probabilities"}


def test_a_gradient_cleared_through_data_is_cleared_and_one_left_out_still_leaks():
    """Note [A gradient written through .data] (trace/doctor_probe.py): the accumulation
    loop clearing each gradient by `p.grad.data.zero_()` instead of zero_grad: once
    "grad_leak ... 4 parameters ... steps 2 and 3" (360 B: 8x8 + 8 + 2x8 + 2 floats); now
    clean. Leaving out the last layer's two is the leak again, for those two: 2x8 + 2
    floats = 72 B (the old code said 4 parameters, 360 B)."""
    assert doctor("grad_leak.py", "--fixed", "--clear", "data").findings == []
    for how in ("data", "mul"):
        (f,) = doctor("grad_leak.py", "--fixed", "--clear", how, "--skip-head").findings
        assert (f.check, f.severity) == ("grad_leak", "error")
        assert f.evidence == {"params": 2, "steps": [2, 3], "bytes": 72}
        assert "2 parameters (`2.weight`, `2.bias`) entered the backward of steps 2 and 3" \
            in f.message
    # the late write cleared through `.data`: the one finding, and no grad_leak beside it
    (w,) = doctor("late_grad_write.py", "--clear", "data").findings
    assert (w.check, w.evidence) == ("written_after_step", {"params": 4, "steps": [1, 2]})


def test_a_branch_kept_over_several_steps_is_reported_at_every_step_end_it_holds():
    """Note [A branch kept over several steps] (trace/doctor_retention.py): the Hessian
    refresh every 2nd step keeps `dist` (its normalised logits, their logsumexp and
    softmax: 128 + 32 + 128 B saved) from one refresh to the next, through every step
    between. The old code said "at the end of steps 2, 4 and 6" of 6; `probs` kept the same
    way read, at 5 steps, as a graph that grows ("up from 1", an error); a list taking
    every refresh's softmax (128 B each) grows: 128, 128, 256, 256, 384 B."""
    (f,) = doctor("hessian_refresh.py", "--bug", "keep", "--every", "2", "--iters", "8",
                  steps=6).findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning")
    assert f.evidence == {"steps": [2, 3, 4, 5, 6], "side_saved_bytes_per_step": [288] * 5,
                          "ops": ["Sub", "Logsumexp", "Softmax"], "also": ["logits"]}
    assert "288 B saved for backward that nothing will read, kept through the step's later " \
           "forward and backward and past its end (at the end of steps 2-6)" in f.message
    (p,) = doctor("hessian_refresh.py", "--bug", "keep-probs", "--every", "2", "--iters", "8",
                  steps=5).findings
    assert (p.check, p.severity) == ("cross_step_retention", "warning")
    assert p.evidence == {"steps": [2, 3, 4, 5], "side_saved_bytes_per_step": [128] * 4,
                          "ops": ["Softmax"]}
    assert p.where.line == line_of("hessian_refresh.py", "probs = torch.softmax(logits, -1)")
    (h,) = doctor("hessian_refresh.py", "--bug", "hist", "--every", "2", "--iters", "8",
                  steps=6).findings
    assert (h.check, h.severity) == ("cross_step_retention", "error")
    assert h.evidence == {"steps": [2, 3, 4, 5, 6],
                          "side_saved_bytes_per_step": [128, 128, 256, 256, 384],
                          "ops": ["Softmax"], "side_tensors_per_step": [1, 1, 2, 2, 3]}
    assert h.message.startswith(
        "`history` keeps branches of the graph that the backward at hessian_refresh.py:"
        f"{line_of('hessian_refresh.py', 'F.cross_entropy(logits, sampled).backward()')} ran "
        "through: ops on their tensors that no backward ran (`Softmax`), which still hold "
        "384 B saved for backward that nothing will read at the end of step 6, up from "
        "128 B in 1 tensor at the end of step 2 (3 tensors now: it takes another branch and "
        "lets go of none)")
    assert h.message.endswith("compute what it keeps under torch.no_grad() or from "
                              "detached tensors")
    assert doctor("hessian_refresh.py", "--bug", "keep", "--no-grad", "--every", "2",
                  "--iters", "8", steps=6).findings == []


def test_a_branch_kept_under_saved_tensor_hooks_is_reported_unread():
    """Note [A branch saved through hooks] (trace/doctor_retention.py): the refresh's kept
    `dist` with every save through torch's save_on_cpu hooks: the old code said nothing
    (reading a save would run the hooks' unpack); now the warning, its bytes not read."""
    (f,) = doctor("hessian_refresh.py", "--bug", "keep", "--save-on-cpu").findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning")
    assert f.evidence == {"steps": [2, 3], "side_saved_bytes_per_step": [],
                          "ops": ["Sub", "Logsumexp", "Softmax"]}
    assert "which still hold tensors saved for backward that nothing will read (not read: " \
           "saved-tensor hooks were on), kept through the step's later forward and " \
           "backward and past its end (at the end of steps 2 and 3)" in f.message
    assert f.where.line == line_of("hessian_refresh.py",
                                   "dist = torch.distributions.Categorical(logits=logits)")
    for args in (["--bug", "keep", "--save-on-cpu", "--no-grad"], ["--save-on-cpu"]):
        assert doctor("hessian_refresh.py", *args).findings == []


def test_a_store_that_saved_tensor_hooks_fill_is_counted_whole():
    """Note [A store that saved-tensor hooks fill] (trace/doctor_retention.py): the script's
    pack hook keeps every save in `stash` and nothing empties it: 5 storages, 964 B a step
    (the batch 256, the ReLU's output 512, the log-softmax 128, the targets 64, the loss's
    weight total 4). The old code said "`stash` carries autograd history ... each step adds
    3 tensors, 896 B ... `.detach()` of a tensor" (only the saves with history, and a fix
    that frees nothing); a store of copies (8 a step, 1,860 B: the two weights' too) got no
    finding."""
    line = line_of("saved_hooks.py", "def pack(t):")
    (f,) = doctor("saved_hooks.py").findings
    assert (f.check, f.severity, f.where.line) == ("cross_step_retention", "error", line)
    assert f.evidence == {"steps": [1, 2, 3], "tensors_per_step": [5, 10, 15],
                          "bytes_per_step": [964, 1_928, 2_892]}
    assert f.message == (
        "`stash`, which the saved-tensor hook `pack()` here fills with the tensors autograd "
        "saves for backward, is never emptied: at the end of steps 1-3 it holds 15 tensors, "
        "2.8 KiB (up from 5 at the end of step 1; each step adds 5 tensors, 964 B), every "
        "forward's saves kept after the backward that read them; remove each entry in the "
        "unpack hook, or empty `stash` after each backward")
    (c,) = doctor("saved_hooks.py", "--copy").findings
    assert (c.check, c.severity) == ("cross_step_retention", "error")
    assert c.evidence == {"steps": [1, 2, 3], "tensors_per_step": [8, 16, 24],
                          "bytes_per_step": [1_860, 3_720, 5_580]}
    (k,) = doctor("saved_hooks.py", "--keep-last").findings
    assert (k.check, k.severity) == ("cross_step_retention", "warning")
    assert k.evidence == {"steps": [1, 2, 3], "tensors_per_step": [5, 5, 5],
                          "bytes_per_step": [964, 964, 964]}
    assert "still holds 5 tensors, 964 B at the end of steps 1-3, after the backward that " \
           "read them: one forward's saves, kept through the next forward" in k.message
    for args in (["--fixed"], ["--clear"], ["--fixed", "--copy"]):
        assert doctor("saved_hooks.py", *args).findings == [], args


def test_a_gradient_data_set_to_zeros_clears_it_and_one_left_out_still_leaks():
    """Note [A gradient's .data set] (trace/doctor_probe.py): the accumulation loop clearing
    each gradient by `p.grad.data = torch.zeros_like(p.grad)`, which moves no version: once
    "grad_leak ... 4 parameters ... steps 2 and 3", 360 B (8x8 + 8 + 2x8 + 2 floats); now
    clean, and leaving out the last layer's two is the leak for those two: 2x8 + 2 floats =
    72 B (the old code said 4 parameters, 360 B)."""
    assert doctor("grad_leak.py", "--fixed", "--clear", "data-set").findings == []
    for how in ("data-set", "zeros-like", "mul-tensor"):
        (f,) = doctor("grad_leak.py", "--fixed", "--clear", how, "--skip-head").findings
        assert (f.check, f.severity) == ("grad_leak", "error")
        assert f.evidence == {"params": 2, "steps": [2, 3], "bytes": 72}, how
    # a late write cleared so: written_after_step alone, no grad_leak beside it
    (w,) = doctor("late_grad_write.py", "--clear", "data-set").findings
    assert (w.check, w.evidence) == ("written_after_step", {"params": 4, "steps": [1, 2]})


def test_a_leaky_store_of_a_second_stacked_pack_hook_is_counted():
    """Note [Every pack hook the script registers] (trace/doctor_retention.py): the first
    layer under a pair whose unpack pops, the rest of the forward under a leaky pair
    stacked inside it. The store keeps 4 storages, 708 B a step (the ReLU's output 512, the
    log-softmax 128, the targets 64, the loss's weight total 4). Only the first pack seen
    was checked before: the old code said "`stash` carries autograd history ... (at the end
    of steps 2 and 3 ...)" (the saves with history only), and of a store of copies (7 a
    step, 1,604 B: the ReLU's output twice, the second weight, the log-softmax twice, the
    targets, the total) nothing."""
    line = line_of("saved_hooks.py", "def pack(t):")
    (f,) = doctor("saved_hooks.py", "--stacked").findings
    assert (f.check, f.severity, f.where.line) == ("cross_step_retention", "error", line)
    assert f.evidence == {"steps": [1, 2, 3], "tensors_per_step": [4, 8, 12],
                          "bytes_per_step": [708, 1_416, 2_124]}
    assert f.message.startswith("`stash`, which the saved-tensor hook `pack()` here fills")
    (c,) = doctor("saved_hooks.py", "--stacked", "--copy").findings
    assert (c.check, c.severity) == ("cross_step_retention", "error")
    assert c.evidence == {"steps": [1, 2, 3], "tensors_per_step": [7, 14, 21],
                          "bytes_per_step": [1_604, 3_208, 4_812]}


def test_accumulation_whose_backward_runs_in_a_helper_of_another_file_is_read_by_weight():
    """Note [What a backward weighs a loss by] (trace/doctor_probe.py), Note [Passes that
    weigh whole means] (doctor/accumulation.py): two calls a step of micro_steps.py's
    `segment_step` (infini-transformer-pytorch's wrapper loss in plain torch), each a
    backward after segments 1-2 and after segment 3, unscaled: passes weighing 2/3, 1/3,
    2/3, 1/3, two whole means. The old code said nothing."""
    (f,) = doctor("helper_accum.py", "--bug").findings
    assert (f.check, f.severity) == ("loss_not_divided", "warning")
    assert f.evidence == {"micro_batches": 2, "backward_passes": 4,
                          "loss_weights": [0.6667, 0.3333, 0.6667, 0.3333], "steps": [1, 2, 3]}
    assert f.where.file == str(SCRIPTS / "micro_steps.py")
    assert f.where.line == line_of("micro_steps.py", "(running / scale).backward()")
    assert f.message == (
        "4 backward passes per optimizer step (steps 1-3) backpropagate 2 whole means: in 2 "
        "runs of passes, the weights backward gave their loss elements sum to 1 in each; "
        "the gradient is the sum of 2 micro-batch means, 2x their mean; scale each "
        "micro-batch's loss by 1/2 before its backward")
    # the helper's plain mean: the value check, as before
    (m,) = doctor("helper_accum.py", "--mean", "--bug").findings
    assert (m.check, m.evidence["micro_batches"]) == ("loss_not_divided", 2)
    assert m.where.line == line_of("micro_steps.py", "(loss / scale).backward()")


def test_kept_gradients_folded_back_are_used_and_dropped_ones_still_counted():
    """Note [A gradient folded into the step's] (trace/doctor_folded.py): each step, two
    losses on batches of their own, a zero_grad before each backward; the first loss's
    gradients kept (`[p.grad for p in params]`) and summed into `.grad` before the step.
    The second backward found `.grad` None, so the step credited it alone, and the old code
    warned "3 of 6 backward passes made gradients that no optimizer.step() used". Folded,
    every pass is used; logged only, or kept by reference and zeroed in place (the second
    backward then writes its own gradient into the kept tensors), the first is dropped."""
    assert doctor("kept_grads.py", "--fold", "sum").findings == []
    for bug in ("log", "zero"):
        (f,) = doctor("kept_grads.py", "--bug", bug).findings
        assert (f.check, f.severity) == ("dropped_update", "warning")
        assert f.evidence == {"backward_passes": 6, "dropped": 3, "dropped_nonfinite": 0,
                              "optimizer_steps": 3, "updates": 3}


def test_a_gradient_written_over_or_scaled_by_a_kept_ones_norm_drops_its_pass():
    """Note [A gradient written over], Note [A statistic of a gradient carries no pass]
    (trace/doctor_folded.py): two losses a step, the first's gradients kept. `replace`
    puts the kept gradient in place of the second's (`p.grad = k.clone()`): the old code
    credited the second pass and said nothing. `scale` multiplies the second's by the
    kept one's norm (`p.grad.mul_(k.norm())`): the norm carried the first pass into the
    step, and the old code said nothing. Each drops one pass a step, 3 of 6; the step's
    record names the passes written over. `reset` (`p.grad = torch.zeros_like(p)`, then
    the kept added) drops the second loss's passes, 2, 4 and 6 (the old code's "3 of 6"
    were the first loss's, 1, 3, 5: the fold into the set gradient went unseen)."""
    evidence = {"backward_passes": 6, "dropped": 3, "dropped_nonfinite": 0,
                "optimizer_steps": 3, "updates": 3}
    for bug in ("replace", "reset", "scale"):
        (f,) = doctor("kept_grads.py", "--bug", bug).findings
        assert (f.check, f.evidence) == ("dropped_update", evidence), bug
        over = "written over" in f.message
        assert over == (bug != "scale"), f.message
    assert doctor("kept_grads.py", "--fold", "scaled").findings == []
    assert doctor("kept_grads.py", "--fold", "reset").findings == []


def test_a_gradient_cleared_by_a_zero_tensor_is_zeroed_before_step_alone():
    """Note [A gradient written over]: `p.grad = torch.zeros_like(p)` between backward and
    step writes the gradient over, and the step finds it zero: `zeroed_before_step`'s
    error, as before, and no `dropped_update` beside it."""
    (f,) = doctor("written_over.py", "--write", "zeros").findings
    assert (f.check, f.severity, f.evidence) == ("zeroed_before_step", "error",
                                                 {"params": 4, "steps": [1, 2, 3]})


def test_a_gradient_written_over_by_records():
    """The records behind the test above: each step uses the kept pass, folded, and
    finds the other written over."""
    from memledger.trace.doctor_probe import DoctorProbe
    from memledger.trace.script import run_and_classify

    probe = DoctorProbe(max_steps=3)
    with probe:
        run_and_classify(SCRIPTS / "kept_grads.py", ["--bug", "replace"])
    steps = [r for r in probe.records if r["k"] == "step"]
    assert [(st["bw"], st.get("folded"), st.get("written_over")) for st in steps] == [
        ([], [1], [2]), ([], [3], [4]), ([], [5], [6])]


def test_a_loss_function_and_segments_are_weighed():
    """Note [A loss function of its own] (trace/doctor_probe.py): the Charbonnier loss as a
    function in a helper file, 2 micro-batches undivided: the old code recorded no loss;
    now the module form's numbers. Note [Segments are no heads] (doctor/accumulation.py):
    a recurrent model over 2 segments, targets of their own, the sequence's mean (1/2 a
    segment), 2 sequences undivided: the old code read the segments as heads (1/2, 1/2
    each, no run of 1) and said nothing."""
    (f,) = doctor("own_loss.py", "--function", "--bug").findings
    assert f.evidence == {"micro_batches": 2, "steps": [1, 2, 3],
                          "loss_values": f.evidence["backward_values"],
                          "backward_values": f.evidence["backward_values"]}
    assert [round(v, 4) for v in f.evidence["loss_values"]] == [0.844, 0.6352]
    (s,) = doctor("segments.py", "--bug").findings
    assert s.evidence == {"micro_batches": 2, "backward_passes": 2, "loss_weights": [1.0, 1.0],
                          "steps": [1, 2, 3]}
    assert s.message == (
        "2 backward passes per optimizer step (steps 1-3) backpropagate 2 whole means: the "
        "weights backward gave their loss elements sum to 1 in each; the gradient is the sum "
        "of 2 micro-batch means, 2x their mean; scale each micro-batch's loss by 1/2 before "
        "its backward")


def test_a_store_filled_by_hooks_around_a_function_that_calls_no_module_is_counted():
    """Note [Saved-tensor hooks around a function] (trace/doctor_probe.py): the leaky pair
    entered around a function of the script's that runs the MLP by `F.linear` on its
    weights, no module call inside. The hooks were read at module calls only: the old code
    gave the graph walk's words ("`stash` carries autograd history ... each step adds 3
    tensors, 896 B"), and of the store of copies nothing. Now the same numbers as the
    module form: 5 storages, 964 B a step (copies: 8, 1,860 B); the parameters no module
    call named are left out of the store as resident (W2, 256 B, once counted in step 1)."""
    line = line_of("saved_hooks.py", "def pack(t):")
    (f,) = doctor("saved_hooks.py", "--functional").findings
    assert (f.check, f.severity, f.where.line) == ("cross_step_retention", "error", line)
    assert f.evidence == {"steps": [1, 2, 3], "tensors_per_step": [5, 10, 15],
                          "bytes_per_step": [964, 1_928, 2_892]}
    assert "each step adds 5 tensors, 964 B" in f.message
    (c,) = doctor("saved_hooks.py", "--functional", "--copy").findings
    assert c.evidence == {"steps": [1, 2, 3], "tensors_per_step": [8, 16, 24],
                          "bytes_per_step": [1_860, 3_720, 5_580]}
    assert doctor("saved_hooks.py", "--functional", "--fixed").findings == []


def test_heads_summed_a_pass_are_weighed_each():
    """Note [Heads weighed each] (doctor/accumulation.py): two heads' mean squared errors
    on targets of their own, summed a pass, 2 micro-batches a step. Undivided each head
    weighs 1 a pass (2 a pass in all), which no run of 1 matched: the old code said
    nothing; divided by 2 each weighs 1/2 (1 a pass), which the old code read as "2 whole
    means". Deep supervision on one target (helper_accum.py --heads --bug) is found too."""
    (f,) = doctor("two_heads.py", "--bug").findings
    assert (f.check, f.severity) == ("loss_not_divided", "warning")
    assert f.evidence == {"micro_batches": 2, "backward_passes": 2, "loss_weights": [2.0, 2.0],
                          "steps": [1, 2, 3], "heads": 2}
    assert f.message == (
        "2 backward passes per optimizer step (steps 1-3) backpropagate 2 whole means: each "
        "of a pass's 2 losses (heads) weighs 1 in each; the gradient is the sum of 2 "
        "micro-batch means of each head, 2x their mean; scale each micro-batch's loss by "
        "1/2 before its backward")
    assert doctor("two_heads.py").findings == []
    (h,) = doctor("helper_accum.py", "--heads", "--bug").findings
    assert h.evidence["heads"] == 2 and h.evidence["loss_weights"] == [2.0, 2.0]
    assert h.where.line == line_of("micro_steps.py", ("(loss / scale).backward()", 2))


def test_a_loss_module_that_calls_no_functional_loss_is_read():
    """Note [A loss module of its own] (trace/doctor_probe.py): a Charbonnier loss module
    (a mean by hand, no `torch.nn.functional` loss), 2 micro-batches a step, undivided: the
    old code recorded no loss and said nothing. Now its value is the backward's."""
    (f,) = doctor("own_loss.py", "--bug").findings
    assert (f.check, f.evidence["micro_batches"], f.evidence["steps"]) == \
        ("loss_not_divided", 2, [1, 2, 3])
    assert f.evidence["loss_values"] == f.evidence["backward_values"]
    assert doctor("own_loss.py").findings == []
