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
communication add time this model does not see; the output says "modelled". A policy's
added time uses these times alone, never the machine's calibration (Note [A modelled
ledger's added time] in memledger/replay/costs.py).

Worked example (Llama-7B block, bf16, B=1, T=2048, d=4096, SwiGLU width 11,008): the
forward matmuls are 2·T·d·(4d) for wq/wk/wv/wo plus 2·T·d·(3·11,008) for the MLP =
2·2048·4096·(16,384 + 33,024) = 828.9 GFLOP, plus causal attention 2·2·T²·d = 68.7
GFLOP (flash formula, full square): 897.6 GFLOP. At the default cuda F = 400 TFLOP/s one
block's recompute is modelled at 2.24 ms; `checkpoint:layers.*` on 32 blocks adds 72 ms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from memledger.replay.timings import Timings


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
             bandwidth: float | None = None) -> tuple[object, str, float]:
    """`prep` with its timings replaced by FLOPs / F (Note [Modelled time]), a one-line
    description for the output, and the copy bandwidth to use. Idempotent."""
    r = rates_for(led.device, flops, bandwidth)
    text = (f"modelled: FLOPs at {r.flops / 1e12:g} TFLOP/s, copies at "
            f"{r.bandwidth / 1e9:g} GB/s (fake ledger, no measured time)")
    if prep.timings is not None and prep.timings.source == "modelled":
        return prep, text, r.bandwidth
    per_ev = flops_by_event(led)
    cum = np.concatenate([[0.0], np.cumsum(per_ev)])
    n = len(cum) - 1
    call = (cum[np.clip(prep.scope_ev1, 0, n)] - cum[np.clip(prep.scope_ev0, 0, n)]) \
        / r.flops * 1e9                                                     # ns per call
    ends = led.steps["ev"].to_numpy(dtype=np.int64) + 1 if len(led.steps) else np.zeros(0, int)
    starts = np.concatenate([[0], ends[:-1]])
    step_ns = np.rint((cum[np.minimum(ends, n)] - cum[np.minimum(starts, n)])
                      / r.flops * 1e9).astype(np.int64)
    timings = Timings(call_ns=call, call_lo=call.copy(), call_hi=call.copy(),
                      op_ns=per_ev / r.flops * 1e9, op_kind=_op_kinds(prep, n),
                      source="modelled")
    prep = replace(prep, timings=timings, scope_ns=np.rint(call).astype(np.int64),
                   step_ns=step_ns, copy_bytes_per_s=r.bandwidth,
                   untraced_step_ns=float(np.median(step_ns)) if len(step_ns) else 0.0)
    return prep, text, r.bandwidth


def _op_kinds(prep, n: int) -> np.ndarray:
    """The op kind of each event ("" where none): the op that made the first storage made
    there, as a real ledger's op timings name them. Selective's save list matches these
    kinds: its kept ops' FLOPs are not re-run (Note [A modelled ledger's added time] in
    memledger/replay/costs.py)."""
    kind = np.full(n, "", dtype=object)
    created = np.asarray(prep.created, dtype=np.int64)
    ok = (created >= 0) & (created < n)
    if ok.any():
        ev, first = np.unique(created[ok], return_index=True)
        kind[ev] = np.asarray(prep.op_names, dtype=object)[prep.op_code[ok]][first]
    return kind


def prepare(led, prep=None, flops: float | None = None, bandwidth: float | None = None):
    """For predict and plan: (prep, time model text, bandwidth). Real ledgers pass through
    ('traced' means whatever the cost model measured); fake ones are modelled."""
    from memledger.replay.prepared import prepared_of

    prep = prep or prepared_of(led)
    if not led.header.get("fake"):
        return prep, "traced", bandwidth
    return modelled(prep, led, flops, bandwidth)
