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


def _predict_table(width: int) -> list[str]:
    """`memledger predict`'s table for two long policies, printed `width` columns wide."""
    from types import SimpleNamespace

    from memledger.commands import predict as predict_cmd

    long = "base_model.model.transformer.h"
    pols = [SimpleNamespace(policy=p, peak_bytes=978_534, saving_bytes=704_514,
                            added_time_s=7e-4, added_time_lo_s=7e-4, added_time_hi_s=8e-4,
                            peak_step=2, peak_phase="backward", peak_in_recompute="",
                            transfer_s=0.0, idle_regions=[], empty_regions=[])
            for p in (f"offload:{long}.*", f"checkpoint:{long}.0+offload:{long}.1")]
    rep = SimpleNamespace(baseline_peak_bytes=1_683_048, policies=pols, collective_bytes=0,
                          calibration_unsettled="", timings_busy="", time_model="traced", cost_source="ledger",
                          costs_probed=True, untraced_step_time_s=1.0)
    out = io.StringIO()
    con = Console(file=out, width=width, color_system=None)
    orig, predict_cmd.console = predict_cmd.console, con
    try:
        predict_cmd._print_table(rep, "lora.ledger")
    finally:
        predict_cmd.console = orig
    return [ln.rstrip() for ln in out.getvalue().splitlines()]


def test_predict_policies_break_after_a_dot_and_peak_at_is_never_cropped():
    # at 80 columns the policy once folded mid-word (`...model.tran` / `sformer.h.*`); at 60
    # a min_width the table could not honour cropped "peak at" to `2·backw`
    lines = _predict_table(80)
    assert [ln.split("│")[0].rstrip() for ln in lines[3:9]] == [
        "offload:base_model.model.", "transformer.h.*", "checkpoint:base_model.model.",
        "transformer.h.0+", "offload:base_model.model.", "transformer.h.1"]
    assert lines[3].endswith("│ 2·backward")
    narrow = _predict_table(60)
    assert max(len(ln) for ln in narrow) <= 60
    peak_at = "".join(ln.split("│")[-1].strip() for ln in narrow[3:5])
    assert peak_at == "2·backward"


def test_a_step_and_phase_break_after_the_middle_dot():
    assert cells("2·backward", 8) == ["2·", "backward"]
    assert cells("2·backward (recompute blocks.3.mlp)", 10) == [
        "2·backward", "(recompute", "blocks.3.", "mlp)"]


def test_show_at_60_and_80_columns_keeps_every_name_part_whole():
    from memledger.ledger.model import Ledger
    from memledger.report.terminal import render_summary
    from test_report_html import tiny_records   # tests/unit is on sys.path

    led = Ledger.from_records(tiny_records("model.layers.0.mlp.gate_proj"))
    for width in (60, 80):
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(
            render_summary(led.summary(), "t.ledger", width=width))
        text = out.getvalue()
        assert all(len(ln) <= width for ln in text.splitlines()), text
        # each part of the module path and the parameter name is on one line: at 60
        # columns six columns once left the module 8 characters (`gate_` / `proj`)
        assert all("gate_proj" in ln for ln in text.splitlines() if "gate_" in ln), text
        assert "float32" in text
