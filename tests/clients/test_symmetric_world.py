"""A simulated rank (`trace --fake --world 2`) of tests/clients/train_symmetric.py: a
data-parallel loop whose shapes come through collectives, as ring-attention-pytorch's and
soft-moe-pytorch's `all_gather_variable_dim` make them (Note [A symmetric world],
memledger/trace/fake_collectives.py).

Measured on 2 real ranks (`memledger trace --nproc 2 ... --steps 2`, gloo, torch 2.13.0 CPU,
the helper fix51c, 2026-12-07), both ranks alike, ledger = allocator but gloo's few bytes
of `workspace` (Note [Collective scratch]):
- defaults: 109,828 B (parameter 4,224, gradient 4,224, temporary 32,772, input 67,584,
  communication 1,024); `--into-tensor` 109,828 B (activation 2,048, input 65,536);
  `--functional --reduce max` 60,676 B (temporary 16,388, input 34,816).
Before the Note every gathered size and count was unknown (Rule 28 of Note [Fake runs]):
the sizes' equality read as the stand-in False, their max as 0, the count as 0, and each
simulated rank peaked at 10,500 B."""

import contextlib
import io

import pytest

from tests.clients.harness import ledger_pass

pytestmark = pytest.mark.clients

CASES = {(): (109_828, {"parameter": 4_224, "gradient": 4_224, "temporary": 32_772,
                        "input": 67_584, "communication": 1_024}),
         ("--into-tensor",): (109_828, {"parameter": 4_224, "gradient": 4_224,
                                        "activation": 2_048, "temporary": 32_772,
                                        "input": 65_536, "communication": 1_024}),
         ("--functional", "--reduce", "max"): (60_676, {
             "parameter": 4_224, "gradient": 4_224, "temporary": 16_388, "input": 34_816,
             "communication": 1_024})}


@pytest.mark.parametrize("argv", list(CASES), ids=lambda a: " ".join(a) or "defaults")
def test_a_simulated_rank_gathers_what_the_real_ranks_gather(argv):
    """The gathered batch sizes are this rank's on every rank, so the batches are gathered
    unpadded; the all-reduced count is twice this rank's (sum) or this rank's (max), and
    sizes the buffer the loss is scaled through: the fake ledger is the real rank's, each
    category at the peak, and `show` lists the collectives whose values were assumed."""
    peak, at_peak = CASES[argv]
    with contextlib.redirect_stdout(io.StringIO()):
        led = ledger_pass("train_symmetric.py", list(argv), steps=2, world=(2, 1))
    assert led.peak().bytes == peak
    assert {c: b for c, b in led.at_peak().items() if b} == at_peak
    assumed = {(s.op, s.code) for s in led.summary().fake.standins
               if s.value.startswith("this rank's values on every rank")}
    assert ("c10d.allgather_.default", "dist.all_gather(sizes, size)") in assumed, assumed
