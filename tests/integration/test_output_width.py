"""Output read in a CI log: stdout piped, COLUMNS=80. Tables fold long names onto a second
line; no number and no name is cut with an ellipsis, and no table line passes 80 columns."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest

from memledger.units import format_bytes

WIDTH = 80
# its `memledger` runs fork their workers from this process's zygote (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("cli_zygote")


def piped(*args: str) -> str:
    """Run the real CLI with stdout a pipe (not a terminal) and COLUMNS=80."""
    env = {**os.environ, "COLUMNS": str(WIDTH), "TERM": "dumb"}
    env.pop("FORCE_COLOR", None)
    r = subprocess.run([sys.executable, "-m", "memledger", *args], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    return r.stdout


def as_json(*args: str) -> dict:
    """`memledger ARGS --json` through `memledger.cli.main` in this process: the numbers a
    test compares the piped tables with; a JSON document has no width to check (Note [The
    reading verbs in the pytest process], tests/conftest.py)."""
    from memledger.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*args, "--json"]) == 0
    return json.loads(out.getvalue())


def assert_fits(out: str) -> None:
    assert "…" not in out, out
    # table rows: box characters, or columns apart by 2+ spaces (`check` draws no box);
    # sentences (the violations) soft-wrap in the terminal and are not tables
    table_lines = [ln for ln in out.splitlines()
                   if "│" in ln or "┃" in ln or re.search(r"\S {2,}\S", ln)]
    assert table_lines, out
    too_wide = [ln for ln in table_lines if len(ln) > WIDTH]
    assert not too_wide, "\n".join(too_wide)


@pytest.fixture(scope="module")
def gpt(traced_examples):
    return str(traced_examples["gpt"])


def test_show_fits_80_columns_with_every_name_whole(gpt):
    out = piped("show", gpt)
    assert_fits(out)
    summary = as_json("show", gpt)
    assert format_bytes(summary["peak"]["bytes"]) in out
    for row in summary["top_tensors"]:   # each category is printed whole
        assert row["category"] in out
    # the saved-for-backward roll-up: one row per block, then the modules
    assert "blocks.0.*" in out and "blocks.0.attn" in out
    assert "(no module)" not in out


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_check_and_diff_and_plan_fit_80_columns(gpt, traced_examples):
    check = piped("check", gpt, "--budget", "1MiB", "--category", "optimizer_state=1KiB")
    assert_fits(check)
    assert "category:optimizer_state" in check    # the limit's name, whole
    assert_fits(piped("diff", str(traced_examples["mlp"]), gpt))
    assert_fits(piped("plan", gpt, "--budget", "30MiB"))
    assert_fits(piped("predict", gpt, "-p", "checkpoint:blocks.*+offload:lm_head",
                      "-p", "selective:@Block"))
    # long parts and a long "peak at" (recompute blocks.3.mlp): names fold, the peak
    # column keeps its digits (it once shrank to nothing)
    long = piped("predict", gpt, "-p", "offload:blocks.[0-3].attn:min=1KiB+checkpoint:blocks.[0-3].mlp")
    assert_fits(long)
    rep = as_json("predict", gpt, "-p",
                  "offload:blocks.[0-3].attn:min=1KiB+checkpoint:blocks.[0-3].mlp")
    assert format_bytes(rep["policies"][0]["peak_bytes"]) in long
