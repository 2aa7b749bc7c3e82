"""How a traced script's own failure is said: one line, as the user can read it."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_a_scripts_terminal_escapes_stay_out_of_the_one_line(tmp_path):
    """torch's `weights_only` message bolds a phrase ("\\x1b[1mdo those steps only if you
    trust the source\\x1b[0m"): memledger's one line carried "[1m" and "[0m" into CI logs."""
    from memledger.errors import ScriptError
    from memledger.trace.script import run_and_classify

    script = tmp_path / "bold.py"
    script.write_text("raise ValueError('load failed, \\x1b[1mdo those steps\\x1b[0m. More')\n")
    out = run_and_classify(script, [])
    assert out.reason == "script raised ValueError: load failed, do those steps. More"
    assert str(ScriptError("a \x1b[31mred\x1b[0m word")) == "memledger: a red word"


def test_the_stop_at_the_last_step_says_what_it_is():
    """A trainer that logs what ended its run (ignite: "Engine run is terminating due to
    exception: ") printed nothing after the colon when memledger stopped the script."""
    from memledger.trace.collector import StopTracing

    assert str(StopTracing()) == "memledger stops the script: the steps asked for are done"


def test_a_failure_in_memledgers_own_hook_is_memledgers(tmp_path):
    """Note [memledger's own hooks fail as memledger] (crash.py): the step pre-hook's
    TypeError on skorch's NeuralNet read "script raised TypeError", exit 3, blaming the
    script. A hook wrapped by `internal` fails as a bug in memledger: exit 70, one line
    naming the file with the traceback; the script's own exceptions stay the script's, and
    memledger's deliberate errors stay what they are."""
    from torch.nn.modules import module as nn_module

    from memledger.crash import internal, is_internal
    from memledger.errors import EXIT_INTERNAL, EXIT_SCRIPT_FAILED, PolicyError, ScriptError
    from memledger.trace.script import run_and_classify
    from memledger.trace.session import _raise_for_ledger_pass

    script = tmp_path / "model.py"
    script.write_text("import torch\ntorch.nn.Linear(2, 2)(torch.ones(1, 2))\n")

    def broken(module, args):
        return {}["no such key"]

    handle = nn_module.register_module_forward_pre_hook(internal(broken))
    try:
        out = run_and_classify(script, [])
    finally:
        handle.remove()
    assert out.code == EXIT_INTERNAL
    assert out.reason.startswith("memledger: internal error (KeyError: 'no such key'); the "
                                 "traceback is in ")
    crash = Path(out.reason.split("the traceback is in ")[1].split(". This is")[0])
    assert "broken" in crash.read_text()
    crash.unlink()

    script.write_text("raise KeyError('the script')\n")
    assert run_and_classify(script, []).code == EXIT_SCRIPT_FAILED

    def refusing(module, args):
        raise PolicyError("refused on purpose")
    with pytest.raises(PolicyError) as refused:
        internal(refusing)(None, ())
    assert not is_internal(refused.value)

    with pytest.raises(ScriptError) as err:
        _raise_for_ledger_pass({"code": EXIT_INTERNAL, "reason": out.reason, "steps": 0},
                               tmp_path / "x.ledger", tmp_path / ".x.partial", False)
    assert err.value.exit_code == EXIT_INTERNAL and "internal error" in str(err.value)


def test_a_failure_in_the_policy_installers_hooks_is_memledgers(tmp_path, monkeypatch):
    """The hooks that apply a policy while the script runs (measure/apply.py
    `PolicyInstaller`) are memledger's too: an unexpected exception in applying the policy
    was "script raised RuntimeError", exit 3; it is exit 70 now. A `PolicyError` stays a
    refusal, exit 2, and the script's own error in the call that found the model stays
    the script's, exit 3."""
    import json

    from memledger.errors import EXIT_INTERNAL, EXIT_SCRIPT_FAILED, EXIT_USAGE
    from memledger.measure import apply as apply_mod
    from memledger.measure import worker as measure_worker

    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    if 'raise' in sys.argv:\n"
        "        m[0].register_forward_hook(lambda *a: 1 / 0)\n"
        "    m(torch.ones(2, 4)).sum().backward(); opt.step(); opt.zero_grad()\n")
    out = tmp_path / "measured.json"

    def measure(*argv: str) -> tuple[int, str]:
        code = measure_worker.main(["--out", str(out), "--policy", "checkpoint:0",
                                    "--steps", "2", "--time-steps", "0", str(script),
                                    "--", *argv])
        return code, json.loads(out.read_text())["error"]

    def bug(*args, **kwargs):
        raise RuntimeError("a bug in applying the policy")
    monkeypatch.setattr(apply_mod, "apply_policy", bug)
    code, error = measure()
    assert code == EXIT_INTERNAL
    assert error.startswith("memledger: internal error (RuntimeError: a bug in applying")
    Path(error.split("the traceback is in ")[1].split(". This is")[0]).unlink()

    def refuse(*args, **kwargs):
        raise apply_mod.PolicyError("refused on purpose")
    monkeypatch.setattr(apply_mod, "apply_policy", refuse)
    assert measure() == (EXIT_USAGE, "memledger: refused on purpose")

    monkeypatch.undo()
    code, error = measure("raise")
    assert code == EXIT_SCRIPT_FAILED and "ZeroDivisionError" in error


def test_no_step_by_forward_passes_names_the_way_that_is_left(tmp_path):
    """A trace with `--steps-by forward` that found no forward (botorch's
    `fit_gpytorch_mll`: scipy's L-BFGS over a GP whose gpytorch `__call__` runs `forward`
    without torch's module hooks) was told to count steps by forward passes
    (--steps-by forward), the flag it had given; it is told why, and the whole script."""
    from memledger.errors import EXIT_OK, EXIT_USAGE, ScriptError
    from memledger.trace.session import _raise_for_ledger_pass

    res = {"code": EXIT_OK, "reason": "", "steps": 0, "events": 2592}
    out, partial = tmp_path / "x.ledger", tmp_path / ".x.partial"
    with pytest.raises(ScriptError) as err:
        _raise_for_ledger_pass(res, out, partial, False, "forward")
    assert err.value.exit_code == EXIT_USAGE
    assert str(err.value) == (
        "memledger: the script ran no forward of a module that holds parameters, through "
        "nn.Module's call (2592 ops seen), so --steps-by forward found no step (a model "
        "whose class calls its own forward, as gpytorch's models do, is not seen so); trace "
        f"the whole script as one step (--steps-by whole); ledger kept at {out}")
    with pytest.raises(ScriptError, match=r"\(--steps-by forward\) or trace the whole"):
        _raise_for_ledger_pass(res, out, partial, False)


def test_cleanup_while_the_stop_unwinds_runs():
    """Note [Cleanup while the stop unwinds] (trace/collector.py): botorch fits inside a
    context manager whose `finally` copies the parameters back. The op there was taken for
    a script that swallowed the stop: the in-process API raised StopTracing again out of
    the `finally` (the copy never made: `w` stayed 0), and the trace worker ended the
    process, the pytest process that runs a client in-process included."""
    import contextlib

    import torch

    import memledger

    w = torch.zeros(2)

    @contextlib.contextmanager
    def rollback():
        try:
            yield
        finally:
            w.add_(1.0)

    lin = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    with memledger.trace(max_steps=1) as led:
        with rollback():
            for _ in range(3):
                lin(torch.ones(1, 2)).sum().backward()
                opt.step()
    assert w.tolist() == [1.0, 1.0] and led.summary().steps_traced == 1
