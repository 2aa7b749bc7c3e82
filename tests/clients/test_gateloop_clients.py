"""gateloop-transformer (lucidrains', tests/clients/train_gateloop.py): a `Transformer` of
`GateLoopedAttention` token mixers (a data-controlled complex linear recurrence, run as an
associative scan of einsums and complex products inside the library's own
`torch.utils.checkpoint`, reentrant: torch's default when the call names none), Adam,
`clip_grad_norm_`, as its train.py.

Measured (`tests/clients/harness.py run_client`, the helper hunt46f, 2026-12-06, torch
2.13.0 CPU, gateloop-transformer 0.2.5; dim 16, 2 layers, 4 gate-loop heads, 8 tokens,
batch 2, `--steps 2`): the ledger equal to the allocator, 170,984 B; `offload:layers.0.0`
159,336 B predicted and measured. Without the library's checkpoint
(`--no-lib-checkpoint`): 187,880 B; `selective:@GateLoopedAttention` 167,144 B and
`offload:@GateLoopedAttention` 132,144 B both sides. `--full-attn` (CausalFullAttention
with data-dependent relative positions, a complex cumprod): 141,848 B;
`checkpoint:@CausalFullAttention` 135,520 B both sides. `--mode simple`
(SimpleGateLoopLayer, its TorchScript scan): 60,360 B + 1,016 B of kernel scratch = the
allocator's 61,376 B; `checkpoint:layers.*` 66,832 B, `offload:layers.*` 49,340 B,
`selective:layers.*` 69,904 B both sides; `--heinsen` (log-space scan) 85,320 B, 79,888 /
58,496 / 82,960 B. The doctor finds nothing in any of them.

Two bugs, both in the library's checkpoint of a function that calls no module
(`gate_loop_operator`): the ledger read 160,872 B, 10,112 B (the checkpoint's generator
state and its re-run's fork) under the allocator (Note [A checkpointed function that
calls no module], trace/collector.py); `offload:layers.0.0` was predicted 162,920 B, 3,584 B
over measured (Note [A save of the read-back copy], replay/engine.py).

A policy checkpoint around the library's own (`checkpoint:@GateLoopedAttention`: predicted
178,792 B, measured 172,648 B; `checkpoint:layers.0.0.fn+offload:layers.1.*` 169,712
against 167,152 B) is refused by both sides in one line now (the helper ckpt46: Note [A
policy checkpoint around a checkpointed function], trace/script_checkpoint.py).

Left by hunt46f, exact since the helper cumprod47: `--full-attn --depth 1`,
`offload:layers.0.0.fn`: predicted 73,132 B, measured 69,300 B (on main before too): the
peak moves into the complex `cumprod`'s backward, which ran torch's composite-compliant
path under the dispatch mode and its short path untraced; now 69,300 B both sides (Note
[A derivative formula that branches on the mode], trace/untraced_formulas.py; pinned in
plain torch by tests/clients/test_cumprod.py).
"""

import importlib.util

import pytest

from tests.clients.harness import HERE, run_client

if importlib.util.find_spec("gateloop_transformer") is None:
    pytest.skip("gateloop-transformer is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


@pytest.fixture(scope="module", autouse=True)
def _imported():
    import gateloop_transformer  # noqa: F401  (rotary-embedding-torch, einops: before any pass)


def test_the_librarys_checkpoint_of_a_function_is_counted_and_offload_around_it_exact():
    """The ledger equals the allocator (it read 10,112 B under: the checkpoint's generator
    state and its reentrant re-run's fork, never met at a module call), and an offload of
    the PreNorm around the gate-looped attention is predicted to the byte (it was 3,584 B
    over: the re-run's saves of the read-back q, k, v and gates held the originals). A
    policy checkpoint of the attention, around the library's checkpoint, is refused by
    both sides in one line (it was predicted 6,144 B over measured). The doctor warns, as
    it does on egnn's reentrant checkpoint: `loss`, kept past the step for its print,
    holds the library's reentrant checkpoint's generator states on ctx (2 x 5,056 B) into
    the next forward; it found nothing while the loop backpropagated `loss / accum`, a
    root below which it did not look (Note [A spent graph held below its root],
    trace/doctor_retention.py)."""
    from memledger.doctor.run import diagnose_in_process

    refused = ["checkpoint:@GateLoopedAttention", "checkpoint:layers.0.0.fn+offload:layers.1.*"]
    run = run_client("train_gateloop.py", [], ["offload:layers.0.0", *refused], steps=2)
    assert run.ledger_peak == run.allocator_peak == 170_984
    assert {t: (p.predicted, p.measured) for t, p in run.policies.items()} == {
        "offload:layers.0.0": (159_336, 159_336), **{t: (None, None) for t in refused}}
    # Note [A policy checkpoint around a checkpointed function] (trace/script_checkpoint.py)
    for text in refused:
        p = run.policies[text]
        assert p.predict_refusal == p.measure_refusal == (
            f"memledger: {text} would checkpoint layers.0.0.fn, whose forward checkpoints the "
            "function gate_loop_operator itself (torch.utils.checkpoint at "
            "gateloop_transformer/gateloop_transformer.py:286): one checkpoint would run "
            "inside the other; that checkpoint is gateloop_transformer's: turn it off by "
            "gateloop_transformer's own option to compare policies, or offload that module "
            "instead")   # Note [A checkpoint a library makes]
    report, outcome = diagnose_in_process(HERE / "train_gateloop.py", [], 2)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning")
    assert f.evidence["ctx_bytes_per_step"] == [10_112, 10_112]
    assert "the autograd Function `CheckpointFunction` keeps on ctx" in f.message
