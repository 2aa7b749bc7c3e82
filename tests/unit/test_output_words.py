"""Numbers in words that keep their sign and precision; the CLI's flags and help text."""

from __future__ import annotations

import pytest

from memledger.cli import main
from memledger.errors import UnitError
from memledger.ledger.names import block_of, module_label, numbered_layers
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
    feed-forward `Sequential(Linear, GELU, Linear)` inside a block, likewise."""
    seen = [("encoder", "Encoder"), ("encoder.attn", "NystromAttention"),
            ("encoder.attn.to_out.0", "Linear"), ("encoder.attn.to_out.1", "Dropout"),
            ("layers.0", "Block"), ("layers.1", "Block"), ("layers.2", "LayerNorm"),
            ("layers.0.ff.0", "Linear"), ("layers.0.ff.1", "GELU"),
            ("layers.0.ff.2", "Linear"), ("solo.0", "Block")]
    layers = numbered_layers(seen)
    assert layers == {"encoder.attn.to_out.0", "encoder.attn.to_out.1", "layers.2",
                      "layers.0.ff.0", "layers.0.ff.1", "layers.0.ff.2"}
    assert block_of("encoder.attn.to_out.0", layers) == "encoder"
    assert block_of("layers.0.ff.2", layers) == "layers.0"
    assert block_of("layers.2", layers) == "layers"
    assert block_of("solo.0", layers) == "solo.0"   # one numbered child: a one-layer list
    assert block_of("encoder.attn.to_out.0") == "encoder.attn.to_out.0"   # no classes known
