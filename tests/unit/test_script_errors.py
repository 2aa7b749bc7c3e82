"""How a traced script's own failure is said: one line, as the user can read it."""

from __future__ import annotations


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
