"""Step and recompute time for fake ledgers, modelled from FLOPs. No torch here.

# Note [Modelled time]
A fake ledger (header `fake: true`) has no meaningful wall time: its kernels were shape
functions. It has FLOPs instead: at trace time every op in torch's flop formula registry
(`torch.utils.flop_counter`; matmuls, convolutions, attention) wrote a `{"k": "flops",
"ev": e, "n": flops}` record. For `predict` and `plan` each forward call of a module then
takes flops(call) / F seconds, a step takes flops(step) / F, and there is no tracing
overhead to subtract; offload copies take bytes / B each way. F (`--flops`) and B
(`--bandwidth`) default per device (DEVICE_RATES). The times are a compute-bound lower
bound: element-wise and normalisation kernels (memory-bound, no FLOPs in the registry) and
communication add time this model does not see; the output says "modelled".

Worked example (Llama-7B block, bf16, B=1, T=2048, d=4096, SwiGLU width 11,008): the
forward matmuls are 2·T·d·(4d) for wq/wk/wv/wo plus 2·T·d·(3·11,008) for the MLP =
2·2048·4096·(16,384 + 33,024) = 828.9 GFLOP, plus causal attention 2·2·T²·d = 68.7
GFLOP (flash formula, full square): 897.6 GFLOP. At the default cuda F = 400 TFLOP/s one
block's recompute is modelled at 2.24 ms; `checkpoint:layers.*` on 32 blocks adds 72 ms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Rates:
    flops: float        # FLOP/s sustained on the model's matmuls
    bandwidth: float    # bytes/s one way for offload copies


# Defaults per device kind, documented in docs/fake.md:
DEVICE_RATES = {
    # H100 SXM: 989 TFLOP/s dense bf16 peak at ~40 % MFU; pinned host copies over PCIe 5 x16
    "cuda": Rates(flops=4.0e14, bandwidth=2.5e10),
    # a 32-core AVX-512 server, bf16/fp32 GEMM; disk offload through the page cache
    "cpu": Rates(flops=1.0e12, bandwidth=2.0e9),
}


def rates_for(device: str, flops: float | None = None, bandwidth: float | None = None) -> Rates:
    base = DEVICE_RATES.get(device.partition(":")[0], DEVICE_RATES["cpu"])
    return Rates(flops=flops or base.flops, bandwidth=bandwidth or base.bandwidth)


def flops_by_event(led) -> np.ndarray:
    """FLOPs per event (float64, length n_events)."""
    recs = led.extra.get("flops", [])
    n = led.n_events
    if not recs:
        return np.zeros(n)
    ev = np.fromiter((r["ev"] for r in recs), dtype=np.int64, count=len(recs))
    fl = np.fromiter((r["n"] for r in recs), dtype=np.float64, count=len(recs))
    keep = (ev >= 0) & (ev < n)
    return np.bincount(ev[keep], weights=fl[keep], minlength=n)[:n]


def modelled(prep, led, flops: float | None = None,
             bandwidth: float | None = None) -> tuple[object, str]:
    """`prep` with every time replaced by FLOPs / F (Note [Modelled time]), and a one-line
    description for the output."""
    r = rates_for(led.device, flops, bandwidth)
    cum = np.concatenate([[0.0], np.cumsum(flops_by_event(led))])
    ns = lambda f: np.rint(np.asarray(f) / r.flops * 1e9).astype(np.int64)   # noqa: E731
    scope_ns = ns(cum[prep.scope_ev1] - cum[prep.scope_ev0])
    ends = led.steps["ev"].to_numpy(dtype=np.int64) + 1 if len(led.steps) else np.zeros(0, int)
    starts = np.concatenate([[0], ends[:-1]])
    step_ns = ns(cum[np.minimum(ends, len(cum) - 1)] - cum[np.minimum(starts, len(cum) - 1)])
    untraced = float(np.median(step_ns)) if len(step_ns) else 0.0
    prep = replace(prep, scope_ns=scope_ns, step_ns=step_ns, untraced_step_ns=untraced,
                   copy_bytes_per_s=r.bandwidth)
    text = (f"modelled: FLOPs at {r.flops / 1e12:g} TFLOP/s, copies at "
            f"{r.bandwidth / 1e9:g} GB/s (fake ledger, no measured time)")
    return prep, text
