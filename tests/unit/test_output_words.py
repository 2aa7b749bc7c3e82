"""Numbers in words that keep their sign and precision; the CLI's flags and help text."""

from __future__ import annotations

import pytest

from memledger.cli import main
from memledger.errors import UnitError
from memledger.ledger.names import block_of, module_label, pipelines_of
from memledger.report.terminal import agreement
from memledger.units import format_percent, parse_duration


@pytest.mark.parametrize("fraction, text", [
    (-0.0036, "-0.36%"),     # was "(-0%)" with :+.0%
    (0.0036, "0.36%"),
    (0.125, "12%"),
    (0.034, "3.4%"),
    (0.0, "0%"),
    (3e-7, "0.000030%"),     # 32 B of 100 MiB is not 0%
])
def test_percent_keeps_sign_and_two_digits(fraction, text):
    assert format_percent(fraction) == text


def test_signed_percent():
    assert format_percent(0.0036, signed=True) == "+0.36%"
    assert format_percent(-0.0036, signed=True) == "-0.36%"


def test_agreement_says_which_side_counts_more():
    # allocator 4016 B, ledger 4000 B: 16 B unexplained = 16 / 4016 = 0.398 %
    assert agreement(4016, 4000) == "the ledger explains all but 16 bytes (0.40%)"
    # ledger above the allocator (e.g. a view the allocator never saw): no negative "all but"
    assert agreement(100_000_000, 115_753_208) == (
        "the ledger counts 15,753,208 bytes (16%) more than the allocator saw")
    assert agreement(4000, 4000) == "the ledger explains every byte"


@pytest.mark.parametrize("text, seconds", [("900ms", 0.9), ("1.5s", 1.5), ("250us", 250e-6),
                                           ("2min", 120.0), (" 25 ms ", 0.025)])
def test_durations_need_a_unit(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text, says", [("0.9", "has no unit; write 0.9s or 0.9ms"),
                                        ("-1s", "negative"), ("3 parsecs", "unknown unit .parsecs."), ("fast", "cannot read"),
                                        ("3h", "unknown unit 'h'")])
def test_bad_durations(text, says):
    with pytest.raises(UnitError, match=says):
        parse_duration(text)


def test_blocks_and_labels():
    assert block_of("blocks.0.attn.c_attn") == "blocks.0"
    assert block_of("encoder.layers.11.ff") == "encoder.layers.11"
    assert block_of("lm_head.proj") == "lm_head"
    assert block_of("") == ""
    assert block_of("(GPT2LMHeadModel.forward)") == "(GPT2LMHeadModel.forward)"   # a label
    assert module_label("") == "(script)" and module_label("fc1") == "fc1"


def test_a_sequential_of_different_layers_is_no_list_of_blocks():
    """Note [A numbered part that is no block]: a bare NystromAttention's `to_out` is
    `Sequential(Linear, Dropout)`, and `show` listed `encoder.attn.to_out.0` as a block; a
    feed-forward `Sequential(Linear, GELU, Linear)` inside each of two blocks, likewise."""
    seen = [("encoder", "Encoder"), ("encoder.attn", "NystromAttention"),
            ("encoder.attn.to_out.0", "Linear"), ("encoder.attn.to_out.1", "Dropout"),
            ("layers.0", "Block"), ("layers.1", "Block"), ("layers.0.ff.0", "Linear"),
            ("layers.0.ff.1", "GELU"), ("layers.0.ff.2", "Linear"), ("solo.0", "Block")]
    pipes = pipelines_of(seen)
    assert pipes == {"encoder.attn.to_out", "layers.0.ff"}
    assert block_of("encoder.attn.to_out.0", pipes) == "encoder"
    assert block_of("layers.0.ff.2", pipes) == "layers.0"
    assert block_of("solo.0", pipes) == "solo.0"   # one numbered child: a one-layer list
    assert block_of("encoder.attn.to_out.0") == "encoder.attn.to_out.0"   # no classes known


def test_version(capsys):
    from memledger import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"memledger {__version__}"


@pytest.mark.parametrize("verb", ["trace", "check", "compare", "predict", "measure"])
def test_help_names_what_to_type(verb, capsys):
    assert main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert "<list[str]>" not in out and "-- ARGS..." in out or verb == "predict"
    # flags take no value, --help included
    assert "<bool>" not in out


def test_no_help_shows_bool(capsys):
    # GIVEN the top-level help and every verb's WHEN printed THEN no `<bool>` anywhere
    # (Click's own --help option is made at help time, outside the verbs' params)
    import typer.main

    from memledger.cli import app

    for argv in (["--help"], *([v, "--help"] for v in typer.main.get_command(app).commands)):
        assert main(argv) == 0
        assert "<bool>" not in capsys.readouterr().out, argv


def test_the_verbs_list_wraps_each_summary_as_one_paragraph(capsys, monkeypatch):
    # GIVEN plan's summary, two lines in its docstring WHEN the verbs are listed at 80
    # columns THEN it is one paragraph, wrapped where the column ends, not where the
    # docstring's line did ("...on each repeated" then a half-empty line)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--help"]) == 0
    rows = [ln.strip("│ ").strip() for ln in capsys.readouterr().out.splitlines()]
    at = next(i for i, ln in enumerate(rows) if ln.startswith("plan "))
    assert rows[at].endswith("selective on") and rows[at + 1].startswith("each repeated block)")


def test_a_verbs_help_wraps_its_paragraphs_at_the_terminals_width(capsys, monkeypatch):
    # GIVEN doctor's second paragraph, three lines of ~88 characters in its docstring
    # WHEN its help is printed at 80 columns THEN no line is cut short where the source
    # line ended ("...across steps, the token" / "denominator ...")
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["doctor", "--help"]) == 0
    out = capsys.readouterr().out
    assert "the token denominator of gradient accumulation" in " ".join(out.split())
    lines = out.split("Cut graphs")[1].split("╭")[0].strip().splitlines()
    assert all(len(ln.rstrip()) > 60 for ln in lines[:-1]), lines


def test_predict_step_time_takes_units_like_check(tmp_path, capsys):
    import json

    from tests.unit.test_ledger_model import RECORDS

    led = tmp_path / "hand.ledger"
    led.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    for flag in ("25ms", "0.025s"):
        assert main(["predict", str(led), "-p", "none", "--step-time", flag,
                     "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["schema"] == "memledger.predict/1"
    assert main(["predict", str(led), "-p", "none", "--step-time", "0.025"]) == 2
    assert "has no unit; write 0.025s or 0.025ms" in capsys.readouterr().err


def test_one_byte_is_singular():
    # `plan --budget 1B` once said "no candidate fits 1B (1 bytes)"
    assert agreement(4001, 4000) == "the ledger explains all but 1 byte (0.025%)"
    assert agreement(4000, 4001) == (
        "the ledger counts 1 byte (0.025%) more than the allocator saw")


def test_plan_with_nothing_that_fits_says_1_byte(tmp_path, capsys):
    import json

    from plan_ledgers import blocks_records

    ledger = tmp_path / "t.ledger"
    ledger.write_text("\n".join(json.dumps(r) for r in blocks_records([1000, 1000],
                                                                      [1000, 1000])) + "\n")
    assert main(["plan", str(ledger), "--budget", "1B"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "no candidate fits 1B (1 byte); the lowest predicted peak is" in err


def test_largest_tensors_do_not_say_the_module_twice():
    from memledger.report.terminal import _in_module

    assert _in_module("model.layers.0.mlp.experts.gate_up_proj",
                      "model.layers.0.mlp.experts") == "gate_up_proj"
    # an optimizer state's module is the optimizer: its name keeps the parameter's path
    assert _in_module("fc.weight.exp_avg", "optimizer") == "fc.weight.exp_avg"
    assert _in_module("fc2.weight", "fc") == "fc2.weight"     # a prefix, not the module
    assert _in_module("", "fc") == ""


def test_a_top_level_module_beside_its_own_blocks_reads_as_the_rest():
    from types import SimpleNamespace

    from memledger.report.terminal import _block_label

    by_module = {"model.layers.0.mlp": 1, "model.norm": 1, "lm_head.proj": 1, "fc": 1}
    s = SimpleNamespace(activations=SimpleNamespace(by_module=by_module))
    blocks = {"model.layers.0": 1, "model": 1, "lm_head": 1, "fc": 1}
    assert _block_label("model.layers.0", blocks, s) == "model.layers.0.*"
    assert _block_label("model", blocks, s) == "model.* (rest)"
    assert _block_label("lm_head", blocks, s) == "lm_head.*"
    assert _block_label("fc", blocks, s) == "fc"


def test_bounded_numbers_keep_the_type_column_narrow(capsys, monkeypatch):
    # `<int range> [1<=x<=1024]` took 24 of 80 columns and squeezed every description of
    # `trace --help` to ~23 characters; the bounds now end the description
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["trace", "--help"]) == 0
    out = capsys.readouterr().out
    assert "range" not in out and "<=x" not in out
    import re

    flat = re.sub(r"[\s│]+", " ", out)        # descriptions wrap inside the box
    assert "(1 to 1024)" in flat and "(at least 1)" in flat
