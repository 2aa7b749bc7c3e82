"""Check 8 (double_step, clip_order) on hand-written probe records, and the scheduler's
line found in the source (no torch in the checks; where.py's frame walk for the variable)."""

from __future__ import annotations

from memledger.doctor.analyze import diagnose
from memledger.doctor.findings import Where
from memledger.doctor.source import method_call_line
from tests.unit.test_doctor_checks import _bw, _param, _step


def _clip(n, line, params, window, used=(), used_by=(), scaled=(), scale=0.0):
    return {"k": "clip", "n": n, "fn": "clip_grad_norm_", "limit": 1.0, "file": "t.py",
            "line": line, "window": window, "params": list(params), "used": list(used),
            "used_by": list(used_by), "scaled": list(scaled), "scale": scale}


def test_a_repeat_names_the_second_call_and_the_first_line():
    # backward 1, step 1 at line 9 (fresh), step 2 at line 10 on the same gradients
    recs = [_param(0, "a"), _param(1, "b"), _bw(1, 1), _step(1, [0, 1], {0: 1, 1: 1}, [1]),
            _step(2, [0, 1], {}, [], line=10, again=[0, 1], repeat=2), {"k": "end", "steps": 2}]
    (f,) = diagnose(recs).findings
    assert (f.check, f.severity, f.where) == ("double_step", "error", Where(file="t.py", line=10))
    assert f.evidence == {"optimizer": "SGD", "steps_per_backward": 2, "steps": [2],
                          "params": 2, "first_step_line": 9}


def test_a_step_on_fresh_gradients_is_never_a_repeat():
    # the probe marks no `again` when a backward reached the optimizer's parameters
    recs = [_param(0, "a"), _bw(1, 1), _step(1, [0], {0: 1}, [1], repeat=1, again=[]),
            _bw(2, 2), _step(2, [0], {0: 1}, [2], repeat=1, again=[]), {"k": "end", "steps": 2}]
    assert diagnose(recs).ok


def test_clip_before_backward_only_when_no_later_clip_covers_the_step():
    early = [_param(0, "a"), _clip(1, 4, [0], 1), _bw(1, 1),
             _step(1, [0], {0: 1}, [1], clip_early={"1": [0]}, clipped=[]),
             {"k": "end", "steps": 1}]
    (f,) = diagnose(early).findings
    assert (f.check, f.where, f.evidence["order"]) == ("clip_order", Where(file="t.py", line=4),
                                                       "before_backward")
    # a clip between micro-batches and one after the last: the step's gradient is clipped
    covered = [*early[:3], _clip(2, 6, [0], 1),
               _step(1, [0], {0: 1}, [1], clip_early={"1": [0]}, clipped=[0]),
               {"k": "end", "steps": 1}]
    assert diagnose(covered).ok


def test_clip_after_a_step_that_had_clipped_is_harmless():
    after = [_param(0, "a"), _bw(1, 1), _step(1, [0], {0: 1}, [1], clipped=[]),
             _clip(1, 12, [0], 2, used=[0], used_by=[1]), {"k": "end", "steps": 1}]
    (f,) = diagnose(after).findings
    assert (f.where, f.evidence) == (Where(file="t.py", line=12), {
        "order": "after_step", "function": "clip_grad_norm_", "params": 1, "steps": [1]})
    again = [*after[:2], _step(1, [0], {0: 1}, [1], clipped=[0]), *after[3:]]
    assert diagnose(again).ok


def test_scaled_clip_reports_the_effective_limit():
    recs = [_param(0, "a"), _bw(1, 1), _clip(1, 5, [0], 1, scaled=[0], scale=1024.0),
            _step(1, [0], {0: 1}, [1], clipped=[0]), {"k": "end", "steps": 1}]
    (f,) = diagnose(recs).findings
    # max_norm 1.0 on gradients 1024x too large: 1 / 1024 = 0.000977 on the true ones
    assert "(1024), in step 1: max_norm=1 acts as 0.000977 on the true gradients" in f.message


def test_method_call_line_prefers_the_call_above_the_step_in_its_loop(tmp_path):
    f = tmp_path / "t.py"
    f.write_text("sched.step()\n"                       # 1: outside the loop
                 "for x in data:\n"                     # 2
                 "    loss.backward()\n"                # 3
                 "    self.sched.step()\n"              # 4: above the optimizer step
                 "    opt.step()\n"                     # 5
                 "    sched.step()\n"                   # 6
                 "for i, x in enumerate(data):\n"       # 7
                 "    if i % 2:\n"                      # 8
                 "        opt.step()\n"                 # 9
                 "    other.step()\n")                  # 10: below it, every micro-batch
    assert method_call_line(str(f), "sched", "step", 5) == 4
    assert method_call_line(str(f), "other", "step", 9) == 10
    assert method_call_line(str(f), "sched", "step", 9) == 1   # none in that loop
    assert method_call_line(str(f), "nope", "step", 5) == 0
    assert method_call_line(str(tmp_path / "missing.py"), "sched", "step", 5) == 0


def test_user_name_of_finds_a_local_or_an_attribute():
    from memledger.trace.where import user_name_of

    class Trainer:
        def __init__(self, sched):
            self.sched = sched

    def held_by_attribute(trainer):
        return user_name_of(trainer.sched)

    def held_by_local(sched):
        local_sched = sched
        return user_name_of(local_sched)

    assert held_by_local(object())[0] == "sched"   # the innermost frame's first name
    name, file, line = held_by_attribute(Trainer(object()))
    assert (name, file) == ("sched", __file__) and line > 0
    def held_by_nobody():
        return user_name_of(object())

    nobody = held_by_nobody()
    assert nobody == ("", "", 0)


def test_packages_in_the_user_site_or_a_pth_added_site_dir_are_libraries(monkeypatch, tmp_path):
    """Note [Packages outside the interpreter's own directories] (trace/where.py): a package
    in the user site (`pip install --user`) or in a site-packages a `.pth` file put on
    sys.path read as the user's own code (the doctor walked transformers' modules, and
    stopped on its MODEL_MAPPING); the scheme's purelib was the only site directory known."""
    import site
    import sys

    from memledger.trace import where

    user = tmp_path / "home" / ".local" / "lib" / "python3.11" / "site-packages"
    other = tmp_path / "shared" / ".venv" / "lib" / "python3.11" / "site-packages"
    mine = tmp_path / "project"
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(user))
    monkeypatch.setattr(sys, "path", [*sys.path, str(other), str(mine)])
    dirs = where._library_dirs()
    assert str(user) + "/" in dirs and str(other) + "/" in dirs
    assert not any(str(mine).startswith(d.rstrip("/")) for d in dirs)
    monkeypatch.setattr(where, "_LIBS", dirs)
    monkeypatch.setattr(where, "_user_file", {})
    assert not where.is_user_file(str(user / "transformers" / "modeling_utils.py"))
    assert not where.is_user_file(str(other / "transformers" / "modeling_utils.py"))
    assert where.is_user_file(str(mine / "train.py"))


def test_a_gradient_without_one_pointer_reads_as_pointer_0():
    """Note [A gradient written after the step]: a sparse gradient and a wrapper subclass
    with no storage of its own (a DTensor's; TwoTensor here) have no single data pointer:
    `data_ptr()` raises for both, which would end the doctor (exit 70) at every step."""
    import torch
    from torch.testing._internal.two_tensor import TwoTensor

    from memledger.trace.doctor_order import _pointer

    dense = torch.zeros(3)
    assert _pointer(dense) == dense.data_ptr() != 0
    assert _pointer(torch.zeros(3).to_sparse()) == 0
    assert _pointer(TwoTensor(torch.zeros(3), torch.zeros(3))) == 0
