"""tab-transformer-pytorch (tests/clients/train_tabtf.py): lucidrains' TabTransformer and
FTTransformer trained as a tabular user does, a DataLoader of mixed batches (categorical
codes, some -1 for TabTransformer's special tokens; continuous columns standardised by the
`continuous_mean_std` buffer and a LayerNorm), cross-entropy or MSE, AdamW. The transformer
is hyper_connections' mHC residual streams (4 streams, Sinkhorn-constrained mixing: 20
iterations per block, its `amax(...).detach()` saves read as unread, as they are) around
PreNorm attention and GEGLU feed-forward branches; x-mlps-pytorch's MLP shares one ReLU
between its layers.

Measured (CPU, 2 steps unless said; docs/accuracy.md, "tab-transformer-pytorch"):
TabTransformer dim 32 depth 2, 12,023,580 B ledger = allocator; `checkpoint:transformer.
layers.0.*+offload:transformer.layers.1.*` 7,695,092 = 7,695,092, `checkpoint:@PreNorm`
11,137,564 = 11,137,564, `selective:@Attention` 12,059,292 = 12,059,292, `checkpoint:
transformer` 11,853,088 = 11,853,088. FTTransformer (regression) 13,002,864 = 13,002,864;
`checkpoint:transformer.layers.*.*` 4,623,688, `selective:` 6,523,208, `offload:`
2,060,832, each = measured. bf16 autocast, clipping, OneCycleLR, `return_attn=True` maps
kept, a validation pass under `no_grad`: exact too, the doctor silent. A policy on the
shared ReLU's second path is refused by both sides with one line.

Fixed: an offload with `min=` measured the Sinkhorn's `amax` outputs, which
`log_alpha - log_alpha.amax(...).detach()` drops at once, as held to the end of the
process: the offloader left them in place as the same objects, each held by the `amax`
node it is the output of (Note [A save left in place holds no graph],
memledger/measure/offload.py). `offload:transformer:min=2KiB` (dim 16, 2 steps) measured
1,963,904 B against 1,958,784 B predicted, `min=16KiB` 2,387,412 against 2,356,692; now
equal. The test's mix below measured 732,404 B against 731,124 B.
Skipped without tab_transformer_pytorch."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("tab_transformer_pytorch") is None:
    pytest.skip("tab-transformer-pytorch is not installed", allow_module_level=True)

from tests.clients.harness import assert_one_doctor_error, run_client  # noqa: E402

pytestmark = pytest.mark.clients

# dim 8, one layer, 2 heads, 32 rows in batches of 16 (every 4th row's second column -1:
# a special token), dropout 0.1 in attention and feed-forward (checkpoint restores its RNG)
SMALL = ["--dim", "8", "--depth", "1", "--heads", "2", "--rows", "32", "--batch", "16",
         "--special", "--dropout", "0.1"]
PARAMS = 104_392        # 38 parameter tensors of TabTransformer(dim=8, depth=1, ...), fp32
N_PARAMS = 38           # AdamW: exp_avg and exp_avg_sq each, and a 4 B step per tensor


def test_tabtransformer_step_exact_policies_predicted_and_the_doctor_silent():
    """One step of the typical loop: the ledger is the allocator to the byte, a
    checkpoint of both mHC blocks and a selective + offload mix (its offload leaving the
    Sinkhorn's 1,280 B storages in place, `min=2KiB`: 1,280 B over before the fix) are
    predicted = measured,
    the special-token branch ran (its embedding looked up in step 1), AdamW's state is
    2 x parameters + step counters, and the doctor finds nothing in two steps."""
    run = run_client("train_tabtf.py", SMALL,
                     ["checkpoint:transformer.layers.*.*",
                      "selective:transformer.layers.0.0+offload:transformer.layers.0.1:min=2KiB"],
                     steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == run.ledger_peak == 1_134_564
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {"checkpoint:transformer.layers.*.*": (728_564, 728_564),
                   "selective:transformer.layers.0.0+offload:transformer.layers.0.1:min=2KiB":
                       (731_124, 731_124)}, got
    st = run.ledger.storages
    special = st[st["module"].astype(str).str.startswith("special_token_embed")
                 & (st["op"] == "embedding.default")]
    assert list(special["step"]) == [1]
    end = run.ledger.resident_at_end()
    assert end["parameter"] == PARAMS
    assert end["optimizer_state"] == 2 * PARAMS + 4 * N_PARAMS
    assert_one_doctor_error("train_tabtf.py", SMALL, 2, None, "")
