"""The doctor's checks on hand-written probe records (no torch, no script): exact numbers."""

from __future__ import annotations

from memledger.doctor.analyze import diagnose
from memledger.doctor.findings import DoctorReport, Finding, Where
from memledger.doctor.records import steps_named
from memledger.doctor.source import accumulation_line


def _param(i, name, trainable=True, nbytes=64, root=0):
    return {"k": "param", "i": i, "name": name, "trainable": trainable, "bytes": nbytes,
            "root": root}


def _step(step, params, accum, bw, **kw):
    rec = {"k": "step", "opt": 0, "cls": "SGD", "step": step, "file": "t.py", "line": 9,
           "params": params, "trainable": params, "late": [], "accum": accum,
           "nonfinite": [], "zeroed": [], "zero": [], "not_run": [], "bw": bw,
           "frozen_moved": [], "updated": len(accum)}
    rec.update(kw)
    return rec


def _bw(n, window, valid=None, value=1.0, loss_value=None, line=7, nonfinite=0):
    losses = [] if valid is None else [{"fn": "cross_entropy", "reduction": "mean",
                                        "valid": valid, "tokens": 64, "value": loss_value,
                                        "file": "t.py", "line": 5}]
    return {"k": "backward", "n": n, "window": window, "value": value, "file": "t.py",
            "line": line, "losses": losses, "params": 2, "nonfinite": nonfinite}


def test_clean_run_has_no_finding():
    recs = [_param(0, "a"), _param(1, "b"), _bw(1, 1), _step(1, [0, 1], {0: 1, 1: 1}, [1]),
            {"k": "end", "steps": 1}]
    rep = diagnose(recs)
    assert rep.ok and rep.findings == [] and rep.steps == 1


def test_token_weights_of_three_micro_batches():
    # K = 3 micro-batches of 10, 20 and 30 valid tokens, each a mean: a token weighs
    # 1/(3*10), 1/(3*20), 1/(3*30); the right weight is 1/60, so relative weights are
    # 60/30 = 2.0, 60/60 = 1.0, 60/90 = 0.6667 and the most/least ratio 30/10 = 3.0
    recs = [_param(0, "a"), _param(1, "b"),
            _bw(1, 1, valid=10), _bw(2, 1, valid=20), _bw(3, 1, valid=30),
            _step(1, [0, 1], {0: 3, 1: 3}, [1, 2, 3]), {"k": "end", "steps": 1}]
    (f,) = diagnose(recs).findings
    assert f.check == "token_denominator" and f.where == Where(file="t.py", line=5)
    assert f.evidence == {"micro_batches": 3, "tokens": [10, 20, 30], "total_tokens": 60,
                          "weight_ratio": 3.0, "relative_weights": [2.0, 1.0, 0.6667],
                          "steps": [1]}


def test_loss_not_divided_needs_one_backward_line_and_equal_values():
    same = [_bw(1, 1, valid=8, value=2.5, loss_value=2.5),
            _bw(2, 1, valid=8, value=1.5, loss_value=1.5)]
    divided = [_bw(1, 1, valid=8, value=1.25, loss_value=2.5),
               _bw(2, 1, valid=8, value=0.75, loss_value=1.5)]
    two_objectives = [_bw(1, 1, valid=8, value=2.5, loss_value=2.5, line=7),
                      _bw(2, 1, valid=8, value=1.5, loss_value=1.5, line=8)]
    checks = []
    for bws in (same, divided, two_objectives):
        recs = [_param(0, "a"), *bws, _step(1, [0], {0: 2}, [1, 2]), {"k": "end", "steps": 1}]
        checks.append([f.check for f in diagnose(recs).findings])
    assert checks == [["loss_not_divided"], [], []]


def test_a_step_short_of_micro_batches_on_the_same_divided_loss():
    """Note [A step short of micro-batches] (doctor/accumulation.py): K = 2 micro-batches
    a step, each loss / 2, and the epoch's fifth micro-batch stepped alone on loss / 2
    (pytorch-accelerated's Trainer): half the mean gradient. A loss halved in every step
    of one pass (a weight the script puts on it) is none, nor a short step whose loss is
    divided by its own count."""
    def run(per_step, divisor_of):
        recs, n = [_param(0, "a")], 0
        for s, k in enumerate(per_step, 1):
            bw = []
            for _ in range(k):
                n += 1
                bw.append(n)
                recs.append(_bw(n, s, valid=8, value=1.0 / divisor_of(k), loss_value=1.0))
            recs.append(_step(s, [0], {0: k}, bw))
        return diagnose([*recs, {"k": "end", "steps": len(per_step)}]).findings

    (f,) = run([2, 2, 1], lambda k: 2)
    assert f.check == "short_accumulation" and f.severity == "warning"
    assert f.where == Where(file="t.py", line=7)
    assert f.evidence == {"micro_batches": 1, "divisor": 2, "steps": [3], "full_steps": [1, 2]}
    assert "step 3 used 1 backward pass on loss / 2, where steps 1 and 2 used 2" in f.message
    assert "the update is 1/2 of the mean gradient" in f.message
    assert [f.check for f in run([3, 2], lambda k: 3)] == ["short_accumulation"]
    assert run([1, 1], lambda k: 2) == []        # a weight on every loss, no accumulation
    assert run([2, 1], lambda k: k) == []        # the short step divided by its own count
    assert run([2, 2], lambda k: 2) == []        # whole steps only


def test_dropped_backward_pass_counts_against_steps():
    # 4 backward passes, 3 steps; pass 2 (non-finite) reached no step: GradScaler skipped it
    recs = [_param(0, "a"), _bw(1, 1), _step(1, [0], {0: 1}, [1]), _bw(2, 2, nonfinite=1),
            _bw(3, 2), _step(2, [0], {0: 1}, [3]), _bw(4, 3), _step(3, [0], {0: 1}, [4]),
            {"k": "end", "steps": 3}]
    (f,) = diagnose(recs).findings
    assert f.check == "dropped_update" and f.severity == "warning"
    assert f.evidence == {"backward_passes": 4, "dropped": 1, "dropped_nonfinite": 1,
                          "optimizer_steps": 3, "updates": 3}


def test_steps_whose_gradients_were_cleared_made_no_update():
    # zero_grad after every backward, a step every 2: the dropped-update count said "3
    # step() calls made 3 updates" and no_update "although 1 had gradients" beside the
    # zeroed_before_step error that says why; now 0 updates, and no no_update
    recs = [_param(0, "a")]
    for k in range(3):
        recs += [_bw(2 * k + 1, k + 1), _bw(2 * k + 2, k + 1),
                 {**_step(k + 1, [0], {0: 1}, [2 * k + 2]), "zeroed": [0], "updated": 0}]
    recs.append({"k": "end", "steps": 3})
    found = {f.check: f for f in diagnose(recs).findings}
    assert set(found) == {"zeroed_before_step", "dropped_update"}
    assert found["dropped_update"].evidence["updates"] == 0
    assert "3 step() calls made 0 updates" in found["dropped_update"].message


def test_cut_groups_parameters_by_the_op_that_cut_them():
    recs = [_param(0, "enc.weight", nbytes=256), _param(1, "enc.bias", nbytes=32),
            _param(2, "head.weight"),
            {"k": "cut", "op": "detach", "window": 1, "file": "m.py", "line": 12,
             "params": [0, 1]},
            _bw(1, 1), _step(1, [0, 1, 2], {2: 1}, [1]), {"k": "end", "steps": 1}]
    (f,) = diagnose(recs).findings
    assert (f.check, f.severity, f.where) == ("cut_graph", "error", Where(file="m.py", line=12))
    assert f.message.startswith("2 trainable parameters (`enc.weight`, `enc.bias`) got no "
                                "gradient in step 1 while 1 other did: the path from the "
                                "loss was cut by `.detach()`")
    assert f.evidence == {"params_without_grad": 2, "params_with_grad": 1,
                          "bytes_without_grad": 256 + 32, "steps": [1]}


def test_a_no_grad_read_of_a_parameter_that_trains_in_another_step_is_no_cut():
    """Note [A no_grad read of a parameter that trains in another step] (doctor/graph.py):
    compressive-transformer's memory compression gets a gradient in step 1 and none in step
    2 (its first segment has no memory); a validation under no_grad read it in window 2.
    That read was blamed ("cut by an op under `torch.no_grad()`", an error); the same read
    of a parameter that never trains still is."""
    recs = [_param(0, "conv.weight"), _param(1, "head.weight"), _param(2, "enc.weight"),
            {"k": "cut", "op": "no_grad", "window": 2, "file": "t.py", "line": 20,
             "params": [0, 1, 2]},
            _bw(1, 1), _step(1, [0, 1, 2], {0: 1, 1: 1}, [1]),
            _bw(2, 2), _step(2, [0, 1, 2], {1: 1}, [2]), {"k": "end", "steps": 2}]
    found = diagnose(recs).findings
    assert not any("conv.weight" in f.message for f in found), [f.line() for f in found]
    cut = [f for f in found if f.check == "cut_graph"]
    assert len(cut) == 1 and cut[0].message.startswith(
        "1 trainable parameter (`enc.weight`) got no gradient in step 2 while 1 other "
        "did: the path from the loss was cut by an op under `torch.no_grad()`")


def test_retention_bytes_per_step_and_growth(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("losses = []\nfor s in range(3):\n    losses.append(loss)\n")
    recs = [{"k": "retained", "step": 2, "name": "losses[0]", "var": "losses",
             "file": str(script), "shape": [], "bytes": 4, "nodes": 11},
            {"k": "retained", "step": 3, "name": "losses[0]", "var": "losses",
             "file": str(script), "shape": [], "bytes": 4, "nodes": 11},
            {"k": "retained", "step": 3, "name": "losses[1]", "var": "losses",
             "file": str(script), "shape": [], "bytes": 4, "nodes": 11},
            {"k": "end", "steps": 3}]
    (f,) = diagnose(recs).findings
    assert f.severity == "error" and f.where == Where(file=str(script), line=3)
    # one 4-byte scalar at the end of step 2, two (8 bytes) at the end of step 3
    assert f.evidence == {"steps": [2, 3], "bytes_per_step": [4, 8], "nodes_per_step": [11, 22],
                          "tensors_per_step": [1, 2]}


def test_accumulation_line_prefers_the_line_that_keeps_history(tmp_path):
    f = tmp_path / "t.py"
    f.write_text("total = 0\nif a:\n    total += loss.item()\nelse:\n    total += loss\n"
                 "t2 = 0\nt2 = t2 + loss\n")
    assert accumulation_line(str(f), "total") == 5
    assert accumulation_line(str(f), "t2") == 7
    assert accumulation_line(str(f), "nope") == 0
    assert accumulation_line(str(tmp_path / "missing.py"), "total") == 0


def test_accumulation_line_looks_in_the_function_whose_variable_it_is(tmp_path):
    """Note [The function whose variable it is] (doctor/source.py): two functions bind
    `loss`; the frame holding it was in the second (line 7), and the line was the first
    function's (3). A function that binds no such name falls back to the whole file."""
    f = tmp_path / "t.py"
    f.write_text("def train_a(model):\n    for s in range(3):\n        loss = model(s)\n"
                 "\n\ndef train_b(model, fn):\n    for s in range(3):\n"
                 "        loss = fn(model(s))\n        loss.backward()\n\n\n"
                 "def other():\n    pass\n")
    assert accumulation_line(str(f), "loss") == 3
    assert accumulation_line(str(f), "loss", at=9) == 8
    assert accumulation_line(str(f), "loss", at=2) == 3
    assert accumulation_line(str(f), "loss", at=13) == 3


def test_retention_advice_names_what_the_line_adds(tmp_path):
    """Note [The tensor an accumulation adds] (doctor/source.py): the advice said
    "accumulate loss.item() or loss.detach()" to a MoE loop summing its aux losses
    (`aux_sum = aux_sum + aux`); it names `aux` now. A line that adds no plain name or
    attribute (`val * n`, a tuple) keeps `loss`."""
    script = tmp_path / "train.py"
    script.write_text("aux_sum = 0.0\nfor s in range(3):\n    aux_sum = aux_sum + aux\n"
                      "    kept.append(out.loss)\n    meter += val * n\n"
                      "    pairs.append((s, loss))\n    t2 = aux + t2\n")
    recs = [{"k": "retained", "step": s, "name": "aux_sum", "var": "aux_sum",
             "file": str(script), "shape": [], "bytes": 4, "nodes": 10 * s}
            for s in (2, 3)] + [{"k": "end", "steps": 3}]
    (f,) = diagnose(recs).findings
    assert f.where.line == 3
    assert f.message.endswith("every step's graph stays reachable; accumulate aux.item() or "
                              "aux.detach() instead"), f.message
    from memledger.doctor.source import accumulated_value

    assert [accumulated_value(str(script), line, var) for line, var in
            [(3, "aux_sum"), (4, "kept"), (5, "meter"), (6, "pairs"), (7, "t2"),
             (4, "aux_sum")]] == ["aux", "out.loss", None, None, "aux", None]
    # a line that adds no plain name: no `loss` named (it said "accumulate loss.item()")
    evaluate = tmp_path / "evaluate.py"
    evaluate.write_text("outs = []\nfor s in range(3):\n    outs.append(model(x))\n")
    recs = [{**r, "name": "outs", "var": "outs", "file": str(evaluate)} for r in recs[:2]] \
        + [recs[2]]
    (f,) = diagnose(recs).findings
    assert f.where.line == 3
    assert f.message.endswith("every step's graph stays reachable; keep what that line adds "
                              "detached instead (`.item()` of a number, `.detach()` of a "
                              "tensor)"), f.message


def test_report_round_trips_through_ledger_records():
    from memledger.ledger.model import Ledger

    f = Finding(check="grad_leak", severity="error", message="m", evidence={"params": 2},
                where=Where(file="t.py", line=3))
    rep = DoctorReport.of([f], steps=3)
    recs = [{"k": "header", "schema": "memledger.ledger/1"},
            {"k": "end", "ev": 0, "status": "ok", "message": "", "steps": 0},
            *rep.ledger_records()]
    led = Ledger.from_records(recs)
    back = DoctorReport.from_ledger_extra(led.extra)
    assert back == rep and back.to_json_dict()["schema"] == "memledger.doctor/1"
    # a ledger the doctor never saw has no report at all (not an empty one)
    assert DoctorReport.from_ledger_extra(Ledger.from_records(recs[:2]).extra) is None


def test_steps_read_as_a_sentence_says_them():
    """"in step 2, 3" read as a list of step 2 and something called 3."""
    assert [steps_named(s) for s in ([3, 1, 2], [1, 3], [2, 3], [2], [1, 3, 5], [5, 1, 2])] \
        == ["steps 1-3", "steps 1 and 3", "steps 2 and 3", "step 2", "steps 1, 3 and 5",
            "steps 1, 2 and 5"]


def test_a_dead_penalty_per_autograd_grad_line():
    # Note [A gradient penalty without create_graph]: one finding per `autograd.grad` line,
    # its steps and backward passes counted
    pen = {"k": "penalty", "grad_file": "t.py", "grad_line": 4, "add_file": "t.py",
           "add_line": 6, "file": "t.py", "line": 8}
    recs = [_param(0, "a"), _bw(1, 1), {**pen, "step": 1}, _step(1, [0], {0: 1}, [1]),
            _bw(2, 2), {**pen, "step": 2}, _step(2, [0], {0: 1}, [2]),
            {"k": "end", "steps": 2}]
    (f,) = diagnose(recs).findings
    assert (f.check, f.severity, f.where) == ("dead_penalty", "error", Where(file="t.py", line=4))
    assert f.evidence == {"backward_passes": 2, "steps": [1, 2], "add_line": 6,
                          "backward_line": 8}
    assert f.message.startswith("a loss term made from torch.autograd.grad() without "
                                "create_graph=True (line 4) was added to the loss at line 6 "
                                "and backpropagated at line 8, in steps 1 and 2:")


def test_a_parameter_of_no_module_reached_by_backward():
    # a bare `nn.Parameter` in the optimizer beside a model's (a learned loss scale; pyro's
    # param store) has no root network: `root` None. eval_mode's int(None) crashed the
    # doctor, and so every `compare` of such a script
    recs = [_param(0, "a"), _param(1, "scale", root=None),
            {**_bw(1, 1), "reached": [0, 1]}, _step(1, [0, 1], {0: 1, 1: 1}, [1]),
            {"k": "end", "steps": 1}]
    rep = diagnose(recs)
    assert rep.ok and rep.findings == [] and rep.steps == 1


def _no_update_after(first: dict, later_updated: int) -> list[Finding]:
    recs = [_param(0, "a"), _bw(1, 1), {**_step(1, [0], {0: 1}, [1]), **first},
            _bw(2, 2), {**_step(2, [0], {0: 1}, [2]), "updated": later_updated,
                        "state_written": True},
            {"k": "end", "steps": 2}]
    return [f for f in diagnose(recs).findings if f.check == "no_update"]


def test_a_first_step_that_builds_state_is_no_no_update():
    """Note [A step that builds state] (trace/doctor_probe.py): SOAP's and ADOPT's first
    step fills the state and moves nothing; a later step moves the parameters."""
    built = {"updated": 0, "state_built": True, "state_written": True}
    assert _no_update_after(built, later_updated=1) == []
    # never moved in the steps seen (AdaShift's first 10): still a warning, its cause said
    (f,) = _no_update_after(built, later_updated=0)
    assert f.message == (
        "optimizer.step() changed no trainable parameter in steps 1 and 2 although 1 had "
        "gradients (each step wrote only the optimizer's own state: one that gathers "
        "statistics before its first update? run more steps)")
    # a step that wrote nothing and built nothing: the old guess
    (f,) = _no_update_after({"updated": 0}, later_updated=1)
    assert f.message.endswith("in step 1 although 1 had gradients (learning rate 0? a "
                              "wrapper that skips the step?)")


def _rng(step, same_end, moved=True, grad=True, resets=()):
    return {"k": "rng", "step": step, "key": "cpu", "ops": {"F.dropout": 2}, "grad": grad,
            "file": "t.py", "line": 12, "moved": moved, "same_end": same_end,
            "resets": [{"call": "torch.manual_seed", "file": "t.py", "line": ln, "seq": 1}
                       for ln in resets]}


def test_rng_reset_needs_a_repeated_end_that_the_draws_moved_to_under_grad():
    """Note [The same randomness every step]: a step that ended where the previous one did
    although its draws moved the state; not one whose draws moved nothing (dropout p=0 is
    no draw, but a draw may consume nothing), nor draws under no_grad only."""
    end = {"k": "end", "steps": 3}
    (f,) = diagnose([_rng(1, False, resets=[4]), _rng(2, True, resets=[4]),
                     _rng(3, True, resets=[4]), end]).findings
    assert (f.check, f.severity, f.where.line) == ("rng_reset", "error", 4)
    assert f.evidence["steps"] == [1, 2, 3] and f.evidence["reset"] == "torch.manual_seed"
    # no seed call seen (a Generator's set_state): the first draw's line
    (g,) = diagnose([_rng(1, False), _rng(2, True), end]).findings
    assert g.where.line == 12 and "does not see" in g.message and g.evidence["steps"] == [1, 2]
    for recs in ([_rng(1, False), _rng(2, False), _rng(3, False)],        # seeded once
                 [_rng(1, False, moved=False), _rng(2, True, moved=False)],   # nothing moved
                 [_rng(1, False, grad=False), _rng(2, True, grad=False)]):    # no_grad only
        assert diagnose(recs + [end]).findings == []


def test_one_parameter_is_counted_as_one():
    # "1 parameters with requires_grad=False (`f`) were changed" and "the gradients of 1
    # parameters" before the fifty-first session: every check counts with units.count
    recs = [_param(0, "a"), _param(1, "f", trainable=False)]
    for k in range(2):
        recs += [_bw(2 * k + 1, k + 1), _bw(2 * k + 2, k + 1),
                 {**_step(k + 1, [0, 1], {0: 1}, [2 * k + 2]), "zeroed": [0], "updated": 0,
                  "frozen_moved": [1]}]
    recs.append({"k": "end", "steps": 2})
    found = {f.check: f for f in diagnose(recs).findings}
    assert found["frozen_moving"].message.startswith(
        "1 parameter with requires_grad=False (`f`) was changed by optimizer.step() in "
        "steps 1 and 2")
    assert found["zeroed_before_step"].message.startswith(
        "the gradients of 1 parameter (`a`) were cleared between backward and "
        "optimizer.step() in steps 1 and 2")


def test_a_step_that_moved_its_parameters_without_gradients_trained_them():
    # Note [A step that finds its own direction]: a second-order optimizer (pypose's LM)
    # writes its one parameter with no gradient and no backward: once "ERROR no_gradient";
    # the same steps moving nothing stay the error, its one parameter counted as one
    # ("any of the 1 trainable parameters" before)
    moved = [_param(0, "nodes")] + [_step(k, [0], {}, [], updated=1) for k in (1, 2)]
    assert diagnose([*moved, {"k": "end", "steps": 2}]).findings == []
    still = [_param(0, "nodes")] + [_step(k, [0], {}, [], updated=0) for k in (1, 2)]
    (f,) = diagnose([*still, {"k": "end", "steps": 2}]).findings
    assert f.check == "no_gradient"
    assert f.message.startswith("optimizer.step() ran in steps 1 and 2 with no gradient on "
                                "the 1 trainable parameter it holds: nothing trained")


def test_retention_advice_offers_item_only_for_one_number(tmp_path):
    """Note [A kept tensor of several numbers] (doctor/retention.py): a loop that keeps
    each step's 8 x 16 output (`kept.append(out)`, x-mlps-pytorch's FiLMableMLP in
    tests/clients/train_xmlps.py --model film --keep-outputs) was told to "accumulate
    out.item() or out.detach()", and `.item()` refuses a tensor of 128 elements. It is told
    `.detach()` alone now; a kept loss (shape `[]` or `[1]`) still gets both."""
    script = tmp_path / "train.py"
    script.write_text("kept = []\nfor s in range(3):\n    kept.append(out)\n")

    def advice(shape: list[int]) -> str:
        recs = [{"k": "retained", "step": s, "name": "kept", "var": "kept",
                 "file": str(script), "shape": shape, "bytes": 512, "nodes": 32 * s}
                for s in (2, 3)] + [{"k": "end", "steps": 3}]
        (f,) = diagnose(recs).findings
        assert f.where.line == 3
        return f.message.rsplit("; ", 1)[1]

    assert advice([8, 16]) == "accumulate out.detach() instead"
    assert advice([]) == "accumulate out.item() or out.detach() instead"
    assert advice([1]) == "accumulate out.item() or out.detach() instead"
