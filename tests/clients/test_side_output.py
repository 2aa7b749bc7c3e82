"""A side output a block keeps in a container its region made (tests/clients/
train_side.py; Note [Held by a container the region made], memledger/replay/engine.py):
blocks handed a dict {h, v} that replace both entries, the `v` path a side output the
loss drops, each block keeping `list(feats.items())` to its return (as se3-transformer's
EGNN layers keep `htypes`). Under `checkpoint:0` (the whole body) the re-run makes the
first block's `v` again into the re-run's own dict and list, which keep it to the early
stop; the replay read it as kept by an object outside the body (Rule 10) and let the
re-made copy go as it was made.

Measured (`run_client`, the helper fix52b, 2026-12-07, torch 2.13.0 CPU, AMD EPYC AVX2,
one intra-op thread; no kernel scratch at these peaks): `--depth 2` (2 steps) ledger
525,828 B = allocator; `checkpoint:0` predicted 535,944 B against 568,712 B measured
before, one (128, 64) fp32 tensor (32,768 B) under; exact after. The script's own
checkpoint of the body (`--ckpt`), traced: ledger = allocator = 568,712 B, the same peak.
"""

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_side_output_the_region_keeps_is_held_to_the_early_stop():
    run = run_client("train_side.py", ["--depth", "2"], ["checkpoint:0"], steps=2)
    assert run.ledger_peak == run.ledger.peak_with_scratch() == run.allocator_peak == 525_828
    p = run.policies["checkpoint:0"]
    assert p.predicted == p.measured == 568_712
    # the script's own checkpoint of the body: the same peak, in its re-run
    own = run_client("train_side.py", ["--depth", "2", "--ckpt"], [], steps=2)
    assert own.ledger_peak == own.ledger.peak_with_scratch() == own.allocator_peak == 568_712
