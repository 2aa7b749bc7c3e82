"""This machine's cost constants for the time model, measured once and cached.

    calibration("cpu")   # {"key": ..., "params": {name: {"median", "lo", "hi"}}, ...}

Replay's time model (memledger/replay/costs.py, Note [Added time]) needs a few constants
that belong to the machine and device, not to the model: what torch's checkpoint machinery
costs per call and per saved tensor, what selective checkpointing's dispatch mode costs per
op, and what the offloader costs per storage and per byte. Each is measured here with the
mechanism `measure` really uses (torch.utils.checkpoint, memledger's Offloader), in thread
CPU time (wall with several intra-op threads), `REPS` times; each constant is reported as its median with the 10th and 90th
percentiles of the repetitions (`lo`, `hi`: the uncertainty band replay carries beside
every added time).

Cached as JSON in the user's cache folder (`$MEMLEDGER_CACHE_DIR`, else
`$XDG_CACHE_HOME/memledger`, else `~/.cache/memledger`), keyed by host, device model,
torch version and thread count, so every trace on this machine gets the same numbers and
`memledger trace` writes them into the ledger (the same ledger then predicts the same
times everywhere). Delete the file to measure again.

# Note [Calibration microbenchmarks]
f_k = k chained `sin` ops on a 64-float tensor (each saves its input): k = 1 and k = 33.
  added_ckpt(k) = t(checkpoint(f_k) fwd+bwd) - t(f_k fwd+bwd) = fwd(k) + call + k * save
  so  save = ((added(33) - fwd(33)) - (added(1) - fwd(1))) / 32,  call = added(1) - fwd(1) - save
  selective (every op PREFER_RECOMPUTE) minus checkpoint = sac_call + 2k * sac_op (each op
  passes the caching mode in forward and again in recompute).
Offload: pack + unpack of one fresh storage of 64 KiB and of 4 MiB: per storage =
  file + bytes / bandwidth, two sizes give both; `pack_ns`: pack + unpack of a storage the
  offloader leaves in place (below min_bytes).
"""

from __future__ import annotations

import json
import time

import numpy as np
import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from memledger.measure.offload import Offloader
from memledger.replay.calib_cache import machine_key, read_cached, write_cached

REPS = 15        # repetitions per constant (the band is their 10th..90th percentile)
INNER = 20       # timed iterations per repetition (the clock's resolution is ~1 us)
_clock = time.thread_time_ns   # set by measure_constants (see memledger/trace/timing.py)


def calibration(device: str = "cpu", refresh: bool = False) -> dict:
    """The cached calibration for `device` on this machine, measured on first use."""
    model = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") \
        and torch.cuda.is_available() else None
    if not refresh:
        data = read_cached(device, model)
        if data:
            return data
    from memledger.trace.timing import pick_clock

    data = {"key": machine_key(device, model), "device": device, "clock": pick_clock()[0],
            "reps": REPS, "params": measure_constants(),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_cached(data, device, model)
    return data


def _band(values: list[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {"median": float(np.median(v)), "lo": float(np.percentile(v, 10)),
            "hi": float(np.percentile(v, 90))}


def _chain(k: int):
    def f(x):
        for _ in range(k):
            x = x.sin()
        return x
    return f


def _per_iter(fn, inner: int = INNER) -> float:
    t0 = _clock()
    for _ in range(inner):
        fn()
    return (_clock() - t0) / inner


def _all_recompute(ctx, op, *args, **kwargs):
    return CheckpointPolicy.PREFER_RECOMPUTE


def _sac_context():
    return create_selective_checkpoint_contexts(_all_recompute)


def measure_constants() -> dict:
    global _clock
    from memledger.trace.timing import pick_clock

    _clock = pick_clock()[1]
    x = torch.randn(64, requires_grad=True)
    runs = {}
    for k in (1, 33):
        f = _chain(k)
        runs[k] = {
            "plain": lambda f=f: f(x).sum().backward(),
            "fwd": lambda f=f: f(x),
            "ckpt": lambda f=f: checkpoint(f, x, use_reentrant=False).sum().backward(),
            "sac": lambda f=f: checkpoint(f, x, use_reentrant=False,
                                          context_fn=_sac_context).sum().backward(),
        }
    for k in runs:                      # warm up every path once
        for fn in runs[k].values():
            fn()
    call, save, sac_op, sac_call = [], [], [], []
    for _ in range(REPS):               # interleaved: each repetition times every variant
        t = {(k, name): _per_iter(fn) for k in runs for name, fn in runs[k].items()}
        added = {k: t[k, "ckpt"] - t[k, "plain"] - t[k, "fwd"] for k in runs}
        s = (added[33] - added[1]) / 32
        save.append(s)
        call.append(added[1] - s)
        d = {k: t[k, "sac"] - t[k, "ckpt"] for k in runs}
        op = (d[33] - d[1]) / 64
        sac_op.append(op)
        sac_call.append(d[1] - 2 * op)
    file_ns, per_byte, pack = _offload_constants()
    return {"ckpt_call_ns": _band(call), "ckpt_save_ns": _band(save),
            "sac_op_ns": _band(sac_op), "sac_call_ns": _band(sac_call),
            "offload_file_ns": _band(file_ns), "offload_ns_per_byte": _band(per_byte),
            "pack_ns": _band(pack)}


def _offload_constants() -> tuple[list[float], list[float], list[float]]:
    small, big = 64 * 2**10, 4 * 2**20          # bytes
    off = Offloader(min_bytes=1024)
    tiny = torch.zeros(16)                      # 64 bytes: below min_bytes, stays in place
    try:
        def cycle(nbytes: int, n: int) -> float:
            ts = [torch.empty(nbytes, dtype=torch.uint8) for _ in range(n)]
            t0 = _clock()
            for t in ts:
                off.unpack(off.pack(t))
            return (_clock() - t0) / n
        cycle(small, 2), cycle(big, 2)          # warm up
        file_ns, per_byte, pack = [], [], []
        for _ in range(REPS):
            a, b = cycle(small, 8), cycle(big, 4)
            slope = (b - a) / (big - small)
            per_byte.append(slope)
            file_ns.append(a - slope * small)
            pack.append(_per_iter(lambda: off.unpack(off.pack(tiny)), 200))
        return file_ns, per_byte, pack
    finally:
        off.close()


if __name__ == "__main__":   # python -m memledger.measure.calibrate [device]: measure again
    import sys
    print(json.dumps(calibration(sys.argv[1] if len(sys.argv) > 1 else "cpu", refresh=True),
                     indent=1))
