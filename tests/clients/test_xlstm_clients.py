"""xLSTM (NX-AI's `xlstm`, tests/clients/train_xlstm.py): an `xLSTMLMModel` built from its
config dataclasses, an mLSTM block (its parallel stabilized form) then an sLSTM block (the
"vanilla" backend: a Python loop over time steps writing each step's gates and states into
preallocated buffers), AdamW over the model's own weight-decay groups, a warmup-cosine
schedule, `zero_grad()` before `backward()` as the repository's experiments/main.py has it.

Measured (`tests/clients/harness.py run_client`, the helper hunt46c, 2026-12-06, torch
2.13.0 CPU, xlstm 2.0.6; dim 16, 4 heads, 8 tokens, batch 2, vocabulary 32): `--steps 2`
reads the ledger equal to the allocator, 319,260 B; `checkpoint:xlstm_block_stack.blocks.*`
256,500 B, `selective:` 268,788 B, `offload:` 251,444 B and `checkpoint:...blocks.0+offload:
...blocks.1` 256,500 B, predicted and measured; `checkpoint:` / `offload:` /
`selective:` of the sLSTM cell alone (`blocks.1.xlstm.slstm_cell`, `--tie`) 291,060 /
275,480 / 291,060 B, of the whole `xlstm_block_stack` 286,516 / 243,248 B, both sides.
Where the peak falls in a kernel's scratch the allocator reads more than the ledger's
tensors, and the ledger's scratch records explain it: `--amp` (bf16 autocast) 282,508 B +
2,936 B = 285,444 B; `--mode stack --dropout 0.2 --slstm-at 0,1` 251,564 B + 1,036 B;
mLSTM only, `--steps 1`: 125,592 B + 488 B in `native_group_norm_backward`. Every policy
predicted to the byte there too. `compare` (fresh processes): gradients bitwise under
checkpoint, selective and offload. `--fake`: 311.8 KiB, as the real run (the sLSTM's
`if torch.all(n == 0.0)` read with a stand-in, as `show` says).

The doctor could not watch any script that builds an sLSTM block (exit 3, "script raised
RuntimeError: A view was created in no_grad mode ..."): pinned in plain torch by
tests/unit/test_doctor_retention_views.py (Note [A view whose grad_fn cannot be read]).
"""

import importlib.util

import pytest

from tests.clients.harness import HERE, run_client

if importlib.util.find_spec("xlstm") is None:
    pytest.skip("xlstm is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

BLOCKS = "xlstm_block_stack.blocks"


@pytest.fixture(scope="module", autouse=True)
def _imported():
    # its sLSTM's CUDA loader imports torch's cpp_extension: before any pass
    import xlstm  # noqa: F401


def test_an_mlstm_and_an_slstm_block_exact_under_policies_and_the_doctor_silent():
    """The language model as main.py trains it: the ledger equal to the allocator, a
    checkpoint of both blocks and an offload of the sLSTM block predicted to the byte. The
    doctor watches the loop to its end and finds nothing (it said "the doctor could not
    watch the script" at the sLSTM cell's construction: its `ParameterProxy` writes a view
    of the recurrent kernel made under no_grad and reshapes it, and the probe read that
    view's `grad_fn`)."""
    from memledger.doctor.run import diagnose_in_process

    argv = ["--mode", "lm", "--seq-len", "16"]
    run = run_client("train_xlstm.py", argv, [f"checkpoint:{BLOCKS}.*", f"offload:{BLOCKS}.1"],
                     steps=1)
    assert run.ledger_peak == run.allocator_peak == 371_840
    assert {t: (p.predicted, p.measured) for t, p in run.policies.items()} == {
        f"checkpoint:{BLOCKS}.*": (304_424, 304_424), f"offload:{BLOCKS}.1": (279_872, 279_872)}
    report, outcome = diagnose_in_process(HERE / "train_xlstm.py", argv, 1)
    assert (outcome.code, report.findings) == (0, [])
