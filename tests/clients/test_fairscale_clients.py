"""fairscale 0.4.13 (tests/clients/train_fairscale.py): `OSS` (ZeRO-1) around AdamW,
`ShardedDataParallel` (ZeRO-2) and `checkpoint_wrapper` on the blocks, one gloo rank.

Measured once (`tests/clients/harness.py run_client`, the helper hunt41e, 2026-12-06,
`--steps 2`): OSS + ShardedDataParallel reads the ledger equal to the allocator, 325,732 B;
`checkpoint:module.blocks.*` 282,148 B, `offload:module.blocks.*` 260,196 B and
`selective:module.blocks.*` 311,140 B predicted and measured (ShardedDataParallel wraps the
model as `module`, as torch's DDP does). With `--ckpt wrap` (fairscale's own reentrant
checkpoint on each block): 300,452 B; memledger's checkpoint of those blocks again
305,508 B, selective 326,308 B, offload of a Linear inside them 300,452 B, each predicted
as measured (fairscale's Function is not torch.utils.checkpoint, so memledger's
nested-checkpoint refusal does not see it; it predicts the nesting exactly instead).
`--ckpt offload` (offload_to_cpu=True, no move on a CPU run) reads the same bytes as `wrap`.
`--wrap oss` (OSS alone, gradients all-reduced by hand) the same as OSS + ShardedDataParallel.
On 2 ranks (`memledger trace --nproc 2`, by hand): 325,696 B and 325,708 B, each equal to
its allocator; see docs/accuracy.md. `trace --fake --world 2 --rank r` equals each real rank
in every category at the peak (here rank 1, in process).

fairscale's `FullyShardedDataParallel` is CUDA-only: on a CPU run its first forward raises
KeyError 'all_gather' (its CUDA streams are never made); it is left out.
"""

import contextlib
import importlib.util
import io
import warnings

import pytest

from tests.clients.harness import HERE, run_client

if importlib.util.find_spec("fairscale") is None:
    pytest.skip("fairscale is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

# 12,672 fp32 weights: embedding 64 x 32, two blocks of LayerNorm(32) + Linear(32, 64) +
# Linear(64, 32), head Linear(32, 64)
PARAMS = 4 * (64 * 32 + 2 * (2 * 32 + 32 * 64 + 64 + 64 * 32 + 32) + 32 * 64 + 64)


def _run(argv, policies):
    with contextlib.redirect_stdout(io.StringIO()):
        return run_client("train_fairscale.py", argv, policies, steps=2)


def test_oss_and_sharded_ddp_on_one_rank_are_predicted_as_measured():
    """OSS flattens each rank's parameters into one `ParamBucket` (the parameters become
    views of it): the parameter bytes at the peak are that one storage, 50,688 B; the
    rank's AdamW shard (all of it on one rank) is exp_avg + exp_avg_sq + a 4 B `step` per
    parameter, 2 * 50,688 + 15 * 4 = 101,436 B."""
    pols = ["checkpoint:module.blocks.*", "offload:module.blocks.*",
            "selective:module.blocks.*"]
    run = _run(["--wrap", "sdp"], pols)
    assert run.ledger_peak == run.allocator_peak == 325_732
    assert PARAMS == 50_688
    assert run.summary.at_peak["parameter"] == PARAMS
    assert run.summary.at_peak["optimizer_state"] == 2 * PARAMS + 15 * 4
    got = {p: (r.predicted, r.measured) for p, r in run.policies.items()}
    assert got == {"checkpoint:module.blocks.*": (282_148, 282_148),
                   "offload:module.blocks.*": (260_196, 260_196),
                   "selective:module.blocks.*": (311_140, 311_140)}


def test_policies_over_fairscale_checkpointed_blocks_are_predicted_as_measured():
    """fairscale's `checkpoint_wrapper` keeps each block's CPU RNG state on its Function's
    ctx (`torch.get_rng_state()`, 5,056 B) until the graph goes, and one more while each
    block re-runs in backward: the ledger has them (8 over 2 steps), and reads the
    allocator's peak exactly."""
    # Under ShardedDataParallel, whose start broadcasts every parameter (each a view of
    # OSS's first flat bucket, `async_op=True`), one full-suite run in about six read the
    # allocator's peak 50,688 B over the ledger's (351,140 B): the old bucket freed on
    # gloo's worker thread, which no profiler event reports (Note [Frees on a thread the
    # profiler does not follow], trace/unheard_frees.py; forced in
    # tests/integration/test_unheard_frees.py).
    pols = ["checkpoint:module.blocks.*", "selective:module.blocks.*",
            "offload:module.blocks.*.up"]
    run = _run(["--wrap", "sdp", "--ckpt", "wrap"], pols)
    assert run.ledger_peak == run.allocator_peak == 300_452
    st = run.ledger.storages
    rng = st[st["op"] == "torch.get_rng_state"]
    assert (len(rng), set(rng["bytes"])) == (8, {5_056})
    got = {p: (r.predicted, r.measured) for p, r in run.policies.items()}
    assert got == {"checkpoint:module.blocks.*": (305_508, 305_508),
                   "selective:module.blocks.*": (326_308, 326_308),
                   "offload:module.blocks.*.up": (300_452, 300_452)}


def _doctor(argv):
    from memledger.doctor.run import diagnose_in_process

    with warnings.catch_warnings(record=True) as caught, \
            contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        report, outcome = diagnose_in_process(HERE / "train_fairscale.py", argv, 2)
    assert outcome.code == 0, outcome.reason
    return report, [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def test_doctor_names_every_variable_that_keeps_the_checkpoint_ctx():
    """fairscale's checkpoint Function keeps `ctx.fwd_rng_state` (5,056 B a block) as an
    attribute, which backward does not free, until the graph goes. The loop keeps `loss`
    and `logits` past the step, and `logits`' grad_fn is in `loss`'s graph: the doctor said
    "`del loss` after the step frees them", and a script that did so still held both
    states (10,112 B) to the next forward. It now names both (Note [Other variables that
    hold the spent graph], trace/doctor_retention.py). And no warning of torch's: the
    doctor's walk of the script's variables read `torch.distributed.reduce_op` and printed
    its FutureWarning (Note [Asking an object its class])."""
    report, future = _doctor(["--ckpt", "wrap"])
    assert future == []
    assert [(f.check, f.severity) for f in report.findings] == \
        [("cross_step_retention", "warning")]
    msg = report.findings[0].message
    assert msg.startswith("`loss` (and `logits`, which holds part of it) keep its graph")
    assert msg.endswith("`del loss, logits` after the step frees them")
    assert report.findings[0].evidence["ctx_bytes_per_step"] == [2 * 5_056, 2 * 5_056]


def test_a_simulated_rank_that_asks_before_it_joins_is_the_real_rank():
    """The script makes its group only `if not dist.is_initialized()`: under `--fake --world
    2` the fake group exists already, so it never calls init_process_group, and the trace
    was refused ("never called init_process_group ... one process at any world size"). It
    asked for the group, and OSS sharded its optimizer state by the world size (Note [A
    script that asks before it joins], trace/fake_world.py): simulated rank 1 of 2 now
    equals the real rank 1 (`memledger trace --nproc 2`, by hand): 325,708 B, its AdamW
    shard 2 * 25,344 + 9 * 4 = 50,724 B, ShardedDataParallel's two gradient buckets
    2 * 25,344 B."""
    from tests.clients.harness import ledger_pass

    with contextlib.redirect_stdout(io.StringIO()):
        led = ledger_pass("train_fairscale.py", [], steps=2, world=(2, 1))
    assert (led.header["rank"], led.header["world_size"]) == (1, 2)
    at = led.summary().at_peak
    assert led.summary().peak.bytes == 325_708
    assert (at["parameter"], at["optimizer_state"], at["gradient"]) == \
        (PARAMS, 2 * 25_344 + 9 * 4, 2 * 25_344)
