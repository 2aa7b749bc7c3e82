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
Every checkpointed or selective run goes through memledger's own `apply_policy` (the
wrappers `measure` installs: BatchNorm guard, context objects), not bare torch checkpoint.
f_k = k chained `sin` ops on a 64-float tensor (each saves its input): k = 1 and k = 33.
  added_ckpt(k) = t(checkpoint(f_k) fwd+bwd) - t(f_k fwd+bwd) = fwd(k) + call + k * save
  so  save = ((added(33) - fwd(33)) - (added(1) - fwd(1))) / 32,  call = added(1) - fwd(1) - save
  selective (every op PREFER_RECOMPUTE) minus checkpoint = sac_call + 2k * sac_op (each op
  passes the caching mode in forward and again in recompute): kept as `*_chain_ns` only,
  because sin on 64 floats underprices real ops (tiny GPT: selective predicted at 0.8x).
A transformer block's op mix (linear, softmax, mul, add, layer_norm, view, transpose on
  8x8 floats), 1 and 9 units, every op PREFER_RECOMPUTE:
  sac_op = (d(9) - d(1)) / (2 * (ops(9) - ops(1))), d = t(selective) - t(checkpoint),
  ops counted by the allocator pass's own op timer (measured: ~2x the sin chain's).
A real block (Linear-GELU-Linear at the tiny GPT's sizes):
  recompute_factor = (added_ckpt - call - saves * save) / fwd.
Offload: 64 filled storages of 64 KiB, and 12 of 4 MiB, packed in order then unpacked in
  reverse into buffers that stay alive (as forward and backward do: reads from memory, not
  from a cache the write just warmed), then dropped (their slots of the offloader's file
  are given back and taken again by the next cycle, as by the next training step: Note
  [One file, slots reused] in memledger/measure/offload.py); per storage =
  file + bytes × per_byte, the two sizes
  give both; `pack_ns`: pack + unpack of a storage the offloader leaves in place (below
  min_bytes).
"""

from __future__ import annotations

import json
import time

import numpy as np
import torch

from memledger.measure.offload import Offloader
from memledger.replay.calib_cache import (load_average, machine_busy, machine_key,
                                          negative_band, read_cached, write_cached)

REPS = 15        # repetitions per constant (the band is their 10th..90th percentile)
INNER = 20       # timed iterations per repetition (the clock's resolution is ~1 us)
_clock = time.thread_time_ns   # set by measure_constants (see memledger/trace/timing.py)


def calibration(device: str = "cpu", refresh: bool = False) -> dict:
    """The cached calibration for `device` on this machine, measured on first use."""
    model = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") \
        and torch.cuda.is_available() else None
    if not refresh:
        data = read_cached(device, model)
        unsettled = data.get("unsettled") or negative_band(data.get("params") or {})
        if data and not (unsettled and not machine_busy()):
            return data      # kept unless it was taken on a busy machine and this one is quiet
    from memledger.trace.timing import pick_clock

    load_before = load_average()
    params = measure_constants()
    data = {"key": machine_key(device, model), "device": device, "clock": pick_clock()[0],
            "reps": REPS, "params": params,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    # Note [A calibration taken on a busy machine] in memledger/replay/calib_cache.py
    reason = machine_busy(load_before) or negative_band(params)
    if reason:
        data["unsettled"] = reason
    write_cached(data, device, model)
    return data


def _band(values: list[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {"median": float(np.median(v)), "lo": float(np.percentile(v, 10)),
            "hi": float(np.percentile(v, 90))}


class _Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _wrapped(fn, policy: str):
    """`fn` as module `body` of a root, under `policy` applied by memledger's own
    apply_policy: the calibration prices the wrappers `measure` runs (BatchNorm guard,
    context objects), not only torch's checkpoint."""
    from memledger.measure.apply import apply_policy
    from memledger.replay.policies import parse_policy

    root = torch.nn.Module()
    root.body = _Fn(fn)
    apply_policy(root, parse_policy(policy), check_save=False)   # save=none_: keep nothing
    return root.body


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


def measure_constants() -> dict:
    global _clock
    from memledger.trace.timing import pick_clock

    _clock = pick_clock()[1]
    x = torch.randn(64, requires_grad=True)
    runs = {}
    for k in (1, 33):
        f = _chain(k)
        ck, sc = _wrapped(f, "checkpoint:body"), _wrapped(f, "selective:body:save=none_")
        runs[k] = {
            "plain": lambda f=f: f(x).sum().backward(),
            "fwd": lambda f=f: f(x),
            "ckpt": lambda ck=ck: ck(x).sum().backward(),
            "sac": lambda sc=sc: sc(x).sum().backward(),
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
    zero = {"median": 0.0, "lo": 0.0, "hi": 0.0}
    return {"recompute_factor": _band(_recompute_factor(median(call), median(save))),
            "ckpt_call_ns": _band(call), "ckpt_save_ns": _band(save),
            # selective: per op on a block's op mix; the sin chain's fit for reference only
            "sac_op_ns": _band(_sac_op()), "sac_call_ns": zero,
            "sac_op_chain_ns": _band(sac_op), "sac_call_chain_ns": _band(sac_call),
            "offload_file_ns": _band(file_ns), "offload_ns_per_byte": _band(per_byte),
            "pack_ns": _band(pack)}


def median(v: list[float]) -> float:
    return float(np.median(v))


def _mlp_block():
    """A tiny-GPT-sized MLP block: B*T = 512 rows, C = 128, hidden 512."""
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 128))
    return block, torch.randn(512, 128, requires_grad=True)


def _recompute_factor(call: float, save: float) -> list[float]:
    """What a real block's re-run costs over its plain forward (Note [Calibration
    microbenchmarks])."""
    block, x = _mlp_block()
    saves = 4                                   # addmm input, gelu input, addmm input, x
    wrapped = _wrapped(block, "checkpoint:body")
    plain = lambda: block(x).sum().backward()                                    # noqa: E731
    ckpt = lambda: wrapped(x).sum().backward()                                   # noqa: E731
    fwd = lambda: block(x)                                                        # noqa: E731
    for fn in (plain, ckpt, fwd):
        fn()
    out = []
    for _ in range(REPS):
        t = {name: _per_iter(fn, 5) for name, fn in (("plain", plain), ("ckpt", ckpt),
                                                       ("fwd", fwd))}
        out.append((t["ckpt"] - t["plain"] - call - saves * save) / t["fwd"])
    return out


def _unit_chain(k: int):
    """k units of a transformer block's op mix on 8x8 floats (linear, softmax, mul, add,
    layer_norm, view, transpose): selective checkpointing's per-op cost depends on the ops'
    arguments, and a chain of `sin` underprices it by half."""
    w, b = torch.randn(8, 8), torch.randn(8)

    def f(x):
        for _ in range(k):
            y = torch.nn.functional.linear(x, w, b).softmax(-1) * x + x
            x = torch.nn.functional.layer_norm(y.view(8, 8).transpose(0, 1), (8,))
        return x
    return f


def _sac_op() -> list[float]:
    """Per op, forward and re-run: selective (every op PREFER_RECOMPUTE) minus checkpoint
    on 1 and 9 units; the op count from the allocator pass's own op timer."""
    from memledger.trace.timing import OpTimer

    x = torch.randn(8, 8, requires_grad=True)
    runs, ops = {}, {}
    for k in (1, 9):
        f = _unit_chain(k)
        timer = OpTimer(_clock)
        with timer:
            f(x)
        ops[k] = len(timer.ops)
        ck, sc = _wrapped(f, "checkpoint:body"), _wrapped(f, "selective:body:save=none_")
        runs[k] = (lambda ck=ck: ck(x).sum().backward(),
                   lambda sc=sc: sc(x).sum().backward())
        for fn in runs[k]:
            fn()
    out = []
    for _ in range(REPS):
        d = {k: _per_iter(runs[k][1]) - _per_iter(runs[k][0]) for k in runs}
        out.append((d[9] - d[1]) / (2 * (ops[9] - ops[1])))
    return out


def _offload_constants() -> tuple[list[float], list[float], list[float]]:
    """Per storage and per byte, as in training: n filled storages written one after the
    other (forward), then read back in reverse (backward) into buffers that stay alive, so
    reads come from memory, not from a cache still warm from the write, into fresh pages."""
    small, big = 64 * 2**10, 4 * 2**20          # bytes
    off = Offloader(min_bytes=1024)
    tiny = torch.zeros(16)                      # 64 bytes: below min_bytes, stays in place
    try:
        def cycle(nbytes: int, n: int) -> float:
            ts = [torch.ones(nbytes, dtype=torch.uint8) for _ in range(n)]
            t0 = _clock()
            packed = [off.pack(t) for t in ts]
            back = [off.unpack(p) for p in reversed(packed)]
            del back, packed                    # their slots are given back
            return (_clock() - t0) / n
        cycle(small, 4), cycle(big, 4)          # warm up
        file_ns, per_byte, pack = [], [], []
        for _ in range(REPS):
            a, b = cycle(small, 64), cycle(big, 12)      # 4 MiB and 48 MiB in flight
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
