"""The terminal timeline: exact lines for a ledger small enough to check by hand."""

from io import StringIO

import pytest
from rich.console import Console

from memledger.ledger.model import Ledger
from memledger.report.timeline import render_timeline


def tiny_ledger() -> Ledger:
    """A 400 B parameter from event 0; a 400 B activation live on events [1, 3).

    live bytes: ev0 400, ev1 800, ev2 800, ev3 400 -> peak 800 B at event 1."""
    return Ledger.from_records([
        {"k": "header", "schema": "memledger.ledger/1"},
        {"k": "phase", "ev": 0, "ph": "forward", "step": 1},
        {"k": "alloc", "sid": 0, "ev": 0, "bytes": 400, "ph": "forward", "step": 1},
        {"k": "role", "sid": 0, "role": "parameter", "name": "fc.weight"},
        {"k": "alloc", "sid": 1, "ev": 1, "bytes": 400, "ph": "forward", "step": 1},
        {"k": "saved", "sid": 1, "ev": 1, "mod": "fc"},
        {"k": "phase", "ev": 2, "ph": "backward", "step": 1},
        {"k": "free", "sid": 1, "ev": 3, "last": 2},
        {"k": "live", "sid": 0, "last": 3},
        {"k": "step", "step": 1, "ev": 3, "ns": 0},
        {"k": "end", "ev": 4, "status": "ok"},
    ])


def render(led: Ledger, width: int, height: int) -> list[str]:
    con = Console(file=StringIO(), width=width, color_system=None)
    con.print(render_timeline(led, width=width, height=height))
    return con.file.getvalue().split("\n")[:-1]


def test_tiny_ledger_draws_exact_lines():
    # unit = 800 B / 2 rows = 400 B per row; bottom row: every column holds >= 400 B (the
    # parameter, mid 200 B); top row: events 1 and 2 reach 800 B (the activation, mid 600 B).
    assert render(tiny_ledger(), width=60, height=2) == [
        "Live bytes over 4 events (1 per column, the highest shown)",
        "           ▼ peak 800 B at event 1 (step 1, forward)",
        "   800 B ┤ ██",
        "         │████",
        "     0 B └───┴",
        "          FFBB",
        "          █ parameter  █ activation",
    ]


def test_partial_top_cell_is_an_eighth_block():
    # height 3: unit = 800/3 = 266.7 B; row 1 covers [266.7, 533.3): 400 B fills
    # (400 - 266.7) / 266.7 = 0.5 of it -> 4 eighths -> "▄" at events 0 and 3.
    lines = render(tiny_ledger(), width=60, height=3)
    assert lines[3:5] == ["         │▄██▄", "         │████"]


def test_million_events_fit_the_width():
    n = 1_000_000
    led = Ledger.from_records([
        {"k": "header", "schema": "memledger.ledger/1"},
        {"k": "alloc", "sid": 0, "ev": 0, "bytes": 8, "ph": "forward"},
        {"k": "alloc", "sid": 1, "ev": 765_432, "bytes": 1024, "ph": "forward"},
        {"k": "free", "sid": 1, "ev": 765_433},
        {"k": "end", "ev": n, "status": "ok"},
    ])
    lines = render(led, width=80, height=4)
    # 70 columns of ceil(1e6 / 70) = 14286 events; the one-event spike at 765432 lands in
    # column 765432 // 14286 = 53 and is kept (per-bucket max), so the marker is there.
    assert lines[0].startswith("Live bytes over 1,000,000 events (14,286 per column")
    assert lines[1].index("▼") == 10 + 53
    # top row: 1032 B fills [774, 1032) there and nowhere else (8 B elsewhere).
    assert lines[2] == " 1.0 KiB ┤" + " " * 53 + "█"


def test_rejects_a_width_too_small():
    with pytest.raises(ValueError, match="width must be >= 18"):
        render_timeline(tiny_ledger(), width=10)


def test_show_timeline_cli(tmp_path, capsys):
    import json

    from memledger.cli import main

    ledger = tmp_path / "t.ledger"
    recs = [{"k": "header", "schema": "memledger.ledger/1"},
            {"k": "alloc", "sid": 0, "ev": 0, "bytes": 400, "ph": "forward"},
            {"k": "end", "ev": 1, "status": "ok"}]
    ledger.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    assert main(["show", str(ledger), "--timeline"]) == 0
    assert "Live bytes over 1 event (1 per column, the highest shown)" in capsys.readouterr().out
    assert main(["show", str(ledger)]) == 0
    assert "Live bytes over" not in capsys.readouterr().out


def test_heading_wraps_rather_than_cropped_when_narrow():
    # at 30 columns the heading (58 characters) once lost its tail: "(1 per column, the hi"
    lines = render(tiny_ledger(), width=30, height=2)
    assert [ln.rstrip() for ln in lines[:2]] == ["Live bytes over 4 events (1",
                                                 "per column, the highest shown)"]
    assert max(len(ln) for ln in lines) <= 30
