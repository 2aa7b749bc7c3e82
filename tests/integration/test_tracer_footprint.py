"""The tracer must not change what is live: graphs backward never reaches are freed.

Before the fix the collector's pack hook returned the saved tensor itself; an op that saves
its own output (`tanh`, `exp`) then had its graph node hold a tensor that holds the node,
a cycle `gc.collect()` cannot free, and tests/clients/train_detached.py read +52.8 % in the
ledger (7,649,368 B against the allocator's 5,005,356 B over 3 steps) and grew per step.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import memledger
from memledger.report.terminal import compiled_line
from tests.clients.harness import run_client


def test_saved_output_of_an_unreached_graph_is_freed():
    # tanh saves its output y: 4 x 8 fp32 = 128 B. Dropping y must free it in the block.
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    with memledger.trace() as led:
        y = torch.tanh(lin(x))
        del y
        torch.zeros(1)   # one more event, so a free before it is told from "still live"
    made = led.storages[~led.storages["pre"]]
    tanh_out = made[made["op"].str.startswith("tanh")]
    assert tanh_out["bytes"].tolist() == [4 * 8 * 4]
    assert tanh_out["freed"].tolist() == [led.n_events - 1]


def test_detached_branch_ledger_equals_allocator_and_does_not_grow():
    run = run_client("train_detached.py", ["--steps", "4"], [], steps=3)
    assert abs(run.ledger_peak - run.allocator_peak) <= 0.001 * run.allocator_peak, \
        (run.ledger_peak, run.allocator_peak)
    # live bytes right after steps 2 and 3 (parameters, the batch, the side branch of that
    # step): the same, so nothing accumulates from one step to the next
    led = run.ledger
    curve = led.curve()
    ends = led.steps["ev"].to_numpy(dtype=np.int64)
    assert curve[ends[1]] == curve[ends[2]]


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_compiled_script_ledger_says_it_is_the_eager_run():
    # Dynamo compiles nothing under the collector's dispatch mode: the ledger pass runs the
    # model eagerly, the allocator pass (no mode) runs the compiled code. `show` says so in
    # one line with both peaks. aot_eager: compiled without a C++ toolchain.
    run = run_client("train_compiled.py", ["--backend", "aot_eager", "--steps", "3"], [])
    assert run.summary.compiled and run.summary.to_json_dict()["compiled"] is True
    line = compiled_line(run.ledger_peak, run.allocator_peak).plain
    assert line.startswith("torch.compile: this ledger is the EAGER run")
    assert f"{run.ledger_peak:,} B" in line and f"{run.allocator_peak:,} B" in line
