"""Names in narrow table cells break after a separator, never inside a word
(memledger/report/names.py)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from memledger.report.names import Name


def cells(name: str, width: int) -> list[str]:
    """The lines of a one-column table `width` wide holding `name`, borders stripped."""
    t = Table(show_header=False, show_edge=False, box=None, pad_edge=False)
    t.add_column("name")
    t.add_row(Name(name))
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(t)
    return [ln.rstrip() for ln in out.getvalue().splitlines()]


def test_a_dotted_name_breaks_after_its_dots():
    assert cells("model.layers.0.mlp.gate_proj.weight", 20) == [
        "model.layers.0.mlp.", "gate_proj.weight"]
    assert cells("model.layers.0.mlp.gate_proj.weight", 80) == [
        "model.layers.0.mlp.gate_proj.weight"]


def test_a_part_wider_than_the_column_breaks_after_an_underscore_then_folds():
    assert cells("_log_softmax_backward_data", 15) == ["_log_softmax_", "backward_data"]
    assert cells("abcdefghij", 4) == ["abcd", "efgh", "ij"]


def test_words_and_policies_break_at_spaces_plus_and_colon():
    assert cells("mm in model.layers.0.mlp", 11) == ["mm in", "model.", "layers.0.", "mlp"]
    assert cells("checkpoint:blocks.*+offload:lm_head", 20) == [
        "checkpoint:blocks.*+", "offload:lm_head"]


def test_the_table_narrows_other_columns_before_it_breaks_a_part():
    # the name's narrowest width is its longest part, so the table gives it that much
    t = Table(show_edge=False, pad_edge=False)
    t.add_column("module")
    t.add_column("what")
    t.add_row(Name("model.layers.0.post_attention_layernorm"), "x" * 60)
    out = io.StringIO()
    Console(file=out, width=60, color_system=None).print(t)
    assert "post_attention_layernorm" in out.getvalue()


def test_markup_in_a_name_is_printed_as_written():
    assert cells("blocks.[/x]", 40) == ["blocks.[/x]"]
