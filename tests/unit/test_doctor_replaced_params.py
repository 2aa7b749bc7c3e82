"""no_optimizer and the parameters a backward reached only before they were replaced (Note
[A backward no step used, for its gradients' own sake], doctor/params.py): hand-written
probe records, no torch."""

from __future__ import annotations

from memledger.doctor.analyze import diagnose


def _param(i, name):
    return {"k": "param", "i": i, "name": name, "trainable": True, "bytes": 64, "root": 0}


def _bw(n, reached):
    return {"k": "backward", "n": n, "window": 1, "value": 1.0, "file": "t.py", "line": 7,
            "losses": [], "params": len(reached), "nonfinite": 0, "reached": reached}


def _step(step, params, bw):
    return {"k": "step", "opt": 0, "cls": "AdamW", "step": step, "file": "t.py", "line": 9,
            "params": params, "trainable": params, "late": [], "accum": {i: 1 for i in params},
            "nonfinite": [], "zeroed": [], "zero": [], "not_run": [], "bw": bw,
            "frozen_moved": [], "updated": len(params)}


def _no_optimizer(recs):
    return [f for f in diagnose(recs).findings if f.check == "no_optimizer"]


def test_parameters_replaced_after_an_importance_backward_are_no_orphans():
    # GIVEN a Taylor-importance backward (n=1) over the unpruned weights 0 and 1, which the
    # pruner then replaces by 2 and 3; the optimizer, made after, holds 2 and 3
    recs = [_param(0, "conv.weight"), _param(1, "bn.weight"), _param(2, "conv.weight"),
            _param(3, "bn.weight"), _bw(1, [0, 1]), _bw(2, [2, 3]), _step(1, [2, 3], [2]),
            _bw(3, [2, 3]), _step(2, [2, 3], [3]), {"k": "end", "steps": 2}]
    # THEN no parameter is "in no optimizer" (it read 2 parameters, conv.weight and
    # bn.weight, before: the replaced ones)
    assert _no_optimizer(recs) == []


def test_a_head_left_out_of_the_optimizer_is_still_found():
    recs = [_param(0, "body.weight"), _param(1, "head.weight"), _bw(1, [0, 1]),
            _step(1, [0], [1]), _bw(2, [0, 1]), _step(2, [0], [2]), {"k": "end", "steps": 2}]
    [f] = _no_optimizer(recs)
    assert f.evidence == {"params": 1, "bytes": 64} and "`head.weight`" in f.message
