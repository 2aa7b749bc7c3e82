"""Note [Work a module's method does outside any call] (trace/collector.py) and Note [The
method that ran] (replay/policies.py), pinned in plain torch (tests/clients/
train_method_call.py): greedy decoding through `Net.step`, which runs each `Cell.step`,
no module call open while the cells' state math runs, as xlstm's `model.step` runs
`mLSTMCell.step` (docs/decisions.md, forty-sixth session, xlstm).

Measured (`tests/clients/harness.py run_client`, the helper items47, 2026-12-06, torch
2.13.0 CPU; width 64, 2 cells, batch 4, a prompt of 4 and 4 new tokens, `--steps-by
whole`). Before: the peak, 297,824 B, "mul.Tensor in the script (outside any module)",
with 11,360 B of temporaries "(script)" live there; `checkpoint:@Cell` and
`offload:cells.1` refused by both sides in the same line, whose examples were guesses
(`cells.0.inverse(x)`, `cells.0.encode(x)`, a forward called directly, a container). Now
the peak is "in cells.1", its temporaries cells.0's (5,120 B) and cells.1's (6,144 B),
96 B the script's own (the argmax tokens), and the line names the method that ran on both
sides.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def _line(sel: str, path: str, attr: str, near: str) -> str:
    return (f"memledger: selector {sel!r} matches {path}, never called as a module: the code "
            f"runs its work through its method `step` (`{path.split(', ')[0]}.step(...)`), "
            "which torch's module hooks, the trace's among them, do not see, so the trace "
            "cannot tell where its work begins and ends, and a policy acts on a module's "
            f"call; select the modules inside it that run as calls: {near}, or call the "
            f"module itself (`self.{attr}(x)`)")


def test_a_method_called_outside_any_call_names_its_module():
    run = run_client("train_method_call.py", [], ["checkpoint:@Cell", "offload:cells.1"],
                     steps=1, steps_by="whole")
    assert (run.ledger_peak, run.allocator_peak) == (297_824, 297_824)
    peak = run.ledger.peak()
    assert (peak.op, peak.module) == ("mul.Tensor", "cells.1")
    live = run.ledger.live_at(peak.event)
    temps = live[live["category"] == "temporary"].groupby("module")["bytes"].sum()
    assert {k: int(v) for k, v in temps.items()} == {
        "": 96, "cells.0": 5_120, "cells.1": 6_144, "cells.1.proj": 4_096, "head": 512}
    refused = {
        "checkpoint:@Cell": _line("@Cell", "cells.0, cells.1", "cells[0]",
                                  "cells.0.norm, cells.0.proj"),
        "offload:cells.1": _line("cells.1", "cells.1", "cells[1]",
                                 "cells.1.norm, cells.1.proj (`cells.1.*` selects them all)"),
    }
    for text, line in refused.items():
        p = run.policies[text]
        assert (p.predicted, p.measured) == (None, None), (text, p)
        assert p.predict_refusal == p.measure_refusal == line, text
