"""Shared fixtures: traced ledgers of the bundled examples, made once per test session."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def load_example(name: str):
    """Import examples/train_<name>.py as a module (for its model classes)."""
    path = EXAMPLES / f"train_{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


# A fixed calibration (this development machine's, rounded) so that traces and predictions
# in tests are deterministic and never spend seconds calibrating. ns; per_byte in ns/byte.
FIXED_CALIBRATION = {name: {"median": m, "lo": lo, "hi": hi} for name, (m, lo, hi) in {
    "ckpt_call_ns": (110_000, 69_000, 124_000), "ckpt_save_ns": (11_000, 8_600, 13_300),
    "sac_op_ns": (8_000, 6_200, 9_500), "sac_call_ns": (0, -28_000, 61_000),
    "offload_file_ns": (91_000, 75_000, 137_000), "offload_ns_per_byte": (1.35, 1.31, 1.42),
    "pack_ns": (260, 250, 370)}.items()}


@pytest.fixture(scope="session", autouse=True)
def calibration_cache(tmp_path_factory):
    """MEMLEDGER_CACHE_DIR: a fresh folder holding FIXED_CALIBRATION for the CPU."""
    import os

    from memledger.replay.calib_cache import machine_key, write_cached

    folder = tmp_path_factory.mktemp("memledger-cache")
    old = os.environ.get("MEMLEDGER_CACHE_DIR")
    os.environ["MEMLEDGER_CACHE_DIR"] = str(folder)
    write_cached({"key": machine_key("cpu"), "device": "cpu", "params": FIXED_CALIBRATION},
                 "cpu")
    yield folder
    if old is None:
        os.environ.pop("MEMLEDGER_CACHE_DIR", None)
    else:
        os.environ["MEMLEDGER_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def traced_examples(tmp_path_factory):
    """{name: ledger path} for mlp, gpt and cnn, each traced for 3 steps with the allocator pass."""
    from memledger.trace.session import trace_script

    out = tmp_path_factory.mktemp("ledgers")
    paths = {}
    for name in ("mlp", "gpt", "cnn"):
        res = trace_script(EXAMPLES / f"train_{name}.py", [], out / f"{name}.ledger", steps=3)
        paths[name] = res.ledger_path
    return paths
