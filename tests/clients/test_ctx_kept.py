"""Note [A region that saves nothing] (replay/predict.py), its third cause, pinned in plain
torch (tests/clients/train_ctx_kept.py): a reversible block whose custom Function keeps
its output on `ctx` as an attribute and re-runs the block in backward, as
h-transformer-1d's `ReversibleSequence` does (tests/clients/test_hlong_clients.py).

The helper hunt49n, 2026-12-07, torch 2.13.0 CPU: `compare -p checkpoint:net.layers` on
the reversible hierarchical LM (`--lib h --causal --reversible`, 2 steps, 521,364 B, the
policy predicted = measured = the baseline) said "none of its modules (net.layers) saved
anything for backward inside their calls (nothing they compute needs a gradient, as with a
table made from buffers, or their work runs later, outside them, as with a lazy module
...)": neither was so; the line now names the reversible Function's case too.
"""

from __future__ import annotations

import contextlib
import io

from memledger.replay.policies import parse_policy
from memledger.replay.predict import predict
from memledger.report.compare_table import empty_line
from tests.clients.harness import run_client


def test_a_reversible_block_is_said_to_save_nothing_for_the_right_reason():
    with contextlib.redirect_stderr(io.StringIO()):
        run = run_client("train_ctx_kept.py", [], ["checkpoint:rev"], steps=2)
    pol = run.policies["checkpoint:rev"]
    assert run.ledger_peak == run.allocator_peak == pol.predicted == pol.measured
    said = predict(run.ledger, [parse_policy("checkpoint:rev")], bandwidth=1e9).policies[0]
    assert (said.saving_bytes, said.empty_regions) == (0, ["rev"])
    line = empty_line("checkpoint:rev", said.empty_regions, len(said.regions))
    assert line.startswith("checkpoint:rev: none of its modules (rev) saved anything")
    assert "a reversible layer's custom Function that keeps its input on ctx" in line
    # Note [The module that made a node] (trace/node_makers.py): the chunk's node after
    # `rev` and `_Rev`'s own ops, which it runs after its nested backward passes, unpack
    # nothing: named by the module whose call made their node, `rev`. Before: "out" (the
    # chunk's zeros and cat), "rev.g" and "rev.f" (the last nested unpack's)
    st = run.ledger.storages
    bw = st[(st["phase"] == "backward") & (st["step"] == 2)].sort_values("created")
    assert [(op, b) for op, m, b in zip(bw["op"], bw["module"], bw["bytes"]) if m == "rev"] \
        == [("zeros.default", 512), ("cat.default", 1024),     # the chunk's node
            ("sub.Tensor", 512), ("add.Tensor", 512),          # x2, dx1
            ("add.Tensor", 512), ("cat.default", 1024),        # the input's gradient
            ("add.Tensor", 512)]   # the two gradients of `inp`'s output, summed
