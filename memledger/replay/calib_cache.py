"""Where the machine's cost calibration is cached, and how it is keyed. No torch.

The calibration itself is measured by memledger/measure/calibrate.py (which needs torch);
reading it back needs only this module, so `predict` and `plan` stay torch-free.

Folder: `$MEMLEDGER_CACHE_DIR`, else `$XDG_CACHE_HOME/memledger`, else
`~/.cache/memledger`. File: `calibration-<key>.json`, the key naming the host, the device
and its model, the torch version and the intra-op thread setting, e.g.
`v1-vm-cpu-AMD_EPYC-torch2.13.0_cpu-tOMP1`.
"""

from __future__ import annotations

import json
import os
import platform
import socket
from importlib import metadata
from pathlib import Path

VERSION = 5   # bump when the constants measured change (v4: through memledger's own wrappers;
              # v5: CPU offload writes slots of one file, Note [One file, slots reused])


def cache_dir() -> Path:
    env = os.environ.get("MEMLEDGER_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "memledger"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(device: str, model: str | None = None) -> str:
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    threads = os.environ.get("OMP_NUM_THREADS", "default")
    raw = (f"{socket.gethostname()}-{device}-{model or cpu_model()}-torch{torch_version}"
           f"-tOMP{threads}")
    return f"v{VERSION}-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in raw)[:180]


def cache_path(device: str, model: str | None = None) -> Path:
    return cache_dir() / f"calibration-{machine_key(device, model)}.json"


def read_cached(device: str, model: str | None = None) -> dict:
    """The cached calibration for this machine and device ({} if none)."""
    path = cache_path(device, model)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if data.get("key") == machine_key(device, model) and data.get("params") else {}


def write_cached(data: dict, device: str, model: str | None = None) -> None:
    path = cache_path(device, model)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)     # atomic: a concurrent trace reads the old or the new file
    except OSError:
        pass                      # a read-only home: measured again next time


# Note [A calibration taken on a busy machine]
# Each constant is a difference of two timings (calibrate.py, Note [Calibration
# microbenchmarks]); when other processes steal the cores, the difference is noise. Measured
# on the 2-core dev box at load average 9.3: recompute_factor 0.31 with a 10th percentile of
# -5.96, sac_op_ns 37 us with a 10th percentile of -613 us, ckpt_call_ns 326 us (lo -53 us);
# a BERT ledger priced with such constants put selective checkpointing at 4x checkpoint.
# Such a calibration is still used (it is all there is) but cached marked `unsettled` with
# its reason: `predict` and `plan` print that reason beside the times, and the next trace on
# a quiet machine (load average at most the core count) measures again and replaces it.
COSTS = ("recompute_factor", "ckpt_call_ns", "ckpt_save_ns", "sac_op_ns", "offload_file_ns",
         "offload_ns_per_byte", "pack_ns")   # physical costs: a band below zero is noise


def busy_reason(load: float, cores: int) -> str:
    """Why the machine is too busy to calibrate ('' when it is not)."""
    return f"load average {load:.1f} on {cores} cores" if load > cores else ""


def load_average() -> float:
    """The 1-minute load average (0 where the platform has none: counted as quiet)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return 0.0


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else (os.cpu_count() or 1)


def machine_busy(load_before: float = 0.0) -> str:
    """`busy_reason` now, or over a span that began at load `load_before`."""
    return busy_reason(max(load_before, load_average()), cores())


def negative_band(params: dict) -> str:
    """The constants whose 10th percentile fell below zero ('' when none did)."""
    bad = [f"{k} {params[k]['lo']:.3g}" for k in COSTS
           if k in params and params[k].get("lo", 0) < 0]
    return "band below zero: " + ", ".join(bad) if bad else ""
