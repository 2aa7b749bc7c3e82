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
