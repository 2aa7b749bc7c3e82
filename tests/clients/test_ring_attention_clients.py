"""ring-attention-pytorch (tests/clients/train_ring_attention.py): lucidrains' RingTransformer,
blocks of `RingAttention` (a blockwise flash attention written as one `autograd.Function`,
its own backward re-computing the weights bucket by bucket) and a feed-forward, as its
README and `assert.py` build it; on one process the ring is off and the same Function
attends over the whole sequence.

Measured (`tests/clients/harness.py run_client`, the helper hunt50a, 2026-12-07, torch
2.13.0 CPU, AVX2, one intra-op thread; ledger = allocator, every policy predicted =
measured):
- `--causal --seq 31 --bucket 16 --batch 1 --dim 8 --depth 1` (1 step, the test): 59,880 B;
  `checkpoint:layers.*.0` 57,992 B, `offload:layers.*.0` 44,752 B, `selective:@RingAttention`
  63,180 B. Before Note [What a node lets go of before it returns] (trace/collector.py):
  65,928, 52,688 and 66,920 B predicted (7,936, 7,936 and 3,740 B over).
- the same at `--seq 63 --depth 2` (1 step): 166,024 B (+2,008 B kernel scratch = 168,032 B
  allocator); 130,032, 101,272 and 227,544 B (before: the first two 5,568 B over).
- `--causal` (defaults, 2 steps) 188,892 B + 476 B scratch; `checkpoint:layers.*.*`
  159,596, `selective:@RingAttention` 201,884, `offload:layers.*.1` 159,876 B;
  `--ring --gqa 2 --lookback 8` (one process: ring off) 176,988 + 476 B; `--regular
  --clip --accum 2 --validate` 217,584 + 476 B: each policy as measured.
- on 2 ranks (`memledger trace --nproc 2`, gloo, `--ring --causal --no-ddp`, by hand):
  198,540 B each rank, ledger = allocator; `checkpoint:layers.*.*` 167,180 B,
  `offload:layers.1.0` 182,924 B, `offload:layers.0.0` 178,572 B, `selective:layers.1.0`
  202,504 B, `selective:@RingAttention` 210,120 B, predicted = measured on both ranks
  (before the Note: the first two 8,192 B over). The 2-rank run costs a minute of
  torchrun launches, so the mechanism is pinned on one process here and in plain torch
  (tests/clients/test_lets_go.py).
The doctor finds nothing on the loop. Skipped without the library."""

import contextlib
import importlib.util
import io

import pytest

from tests.clients.harness import assert_one_doctor_error, ledger_pass, run_client

if importlib.util.find_spec("ring_attention_pytorch") is None:
    pytest.skip("ring-attention-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

ARGV = ["--causal", "--seq", "31", "--bucket", "16", "--batch", "1", "--dim", "8",
        "--depth", "1"]
RING = ["--ring", "--causal", "--no-ddp"]


def test_ring_flash_attention_lets_go_of_k_and_v_in_its_backward():
    """`RingFlashAttentionFunction.backward` unpacks q, k, v, o and lse, then rebinds `k, v`
    to the parts of the stack it sends around the ring: under checkpoint (re-made) and
    offload (read back) the k it unpacked and the qkv storage v is a view of go there,
    before the bucket loop where the step peaks. Each policy is predicted as measured; the
    doctor finds nothing."""
    pols = {"checkpoint:layers.*.0": 57_992, "offload:layers.*.0": 44_752,
            "selective:@RingAttention": 63_180}
    run = run_client("train_ring_attention.py", ARGV, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 59_880
    assert {p: (r.predicted, r.measured) for p, r in run.policies.items()} == \
        {p: (b, b) for p, b in pols.items()}
    assert_one_doctor_error("train_ring_attention.py", ARGV, 2, None, "")


def test_a_simulated_rank_of_the_ring_is_the_real_rank():
    """`trace --fake --world 2 -- --ring --causal --no-ddp`: `all_gather_variable_dim`
    all-gathers each rank's batch size and asks whether they agree. They were unknown
    (Rule 28 of Note [Fake runs]): `has_only_one_value(sizes)` took the stand-in False,
    `sizes.amax().item()` the stand-in 0, and the simulated rank padded and gathered
    batches of other shapes. Every rank holds this rank's size now (Note [A symmetric
    world], trace/fake_collectives.py): the fake rank is the real one, each category at
    the peak, and `show` names the gather whose values it assumed. At `--depth 1 --dim 8
    --batch 1`, 1 step: 36,240 B in step 1's backward (before: 28,768 B at the optimizer);
    the real 2-rank run (`memledger trace --nproc 2`, by hand) 36,240 B on each rank,
    ledger = allocator, the same categories. At the defaults, 2 steps: 198,540 B (before:
    127,072 B), the real ranks' 198,540 B."""
    with contextlib.redirect_stdout(io.StringIO()):
        led = ledger_pass("train_ring_attention.py", [*RING, "--depth", "1", "--dim", "8",
                                                      "--batch", "1"], steps=1, world=(2, 0))
    peak = led.peak()
    assert (peak.bytes, peak.step, peak.phase) == (36_240, 1, "backward")
    assert {c: b for c, b in led.at_peak().items() if b} == {
        "parameter": 6_400, "buffer": 16, "gradient": 3_808, "activation": 9_224,
        "temporary": 6_552, "communication": 10_240}
    said = [(s.value, s.code) for s in led.summary().fake.standins]
    assert ("this rank's values on every rank (a symmetric world)",
            "dist.all_gather(gathered_tensors, t)") in said, said
    assert not any(c.startswith(("if has_only_one_value", "max_size")) for _, c in said), \
        said
