"""Note [A worker's threads, whoever imported torch first] (tests/conftest.py): an xdist
worker's torch runs the worker's share of the cores even where a plugin imported torch
before the conftest set OMP_NUM_THREADS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

IMPORTED_FIRST = """
import torch                      # as a pytest plugin may, before any conftest
before = torch.get_num_threads()
import tests.conftest             # noqa: F401
print(before, torch.get_num_threads())
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: torch's default is 1 too")
def test_a_worker_whose_torch_was_imported_first_runs_its_share_of_the_cores():
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    # as many workers as cores: each worker's share is one thread
    env.update(PYTEST_XDIST_WORKER="gw0", PYTEST_XDIST_WORKER_COUNT=str(os.cpu_count()),
               PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", IMPORTED_FIRST], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    before, after = map(int, r.stdout.split())
    if before == 1:
        pytest.skip("torch's default here is one thread already: nothing to tell apart")
    assert after == 1, (before, after)
