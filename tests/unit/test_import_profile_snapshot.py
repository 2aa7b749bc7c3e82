"""Import a snapshot that torch itself wrote (no GPU): `torch.cuda._memory_viz.
_profile_to_snapshot` turns a CPU torch.profiler run into the `_dump_snapshot` format."""

import pickle

import pytest

from memledger.cli import main
from memledger.ledger.model import Ledger

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def snapshot() -> dict:
    from torch.cuda._memory_viz import _profile_to_snapshot

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True, record_shapes=True,
                                with_stack=True) as prof:
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
    return _profile_to_snapshot(prof)


@pytest.mark.slow
def test_torch_written_snapshot(snapshot, tmp_path):
    src, out = tmp_path / "snap.pickle", tmp_path / "snap.ledger"
    src.write_bytes(pickle.dumps(snapshot))
    assert main(["import", str(src), "-o", str(out)]) == 0
    led = Ledger.load(out)

    # Independent of the importer: replay the trace. Bytes live at the end are the active
    # blocks of the final segments; what was live at the start follows by conservation.
    trace = snapshot["device_traces"][0]
    end = sum(b["size"] for s in snapshot["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated")
    alloc = sum(e["size"] for e in trace if e["action"] == "alloc")
    freed = sum(e["size"] for e in trace if e["action"] == "free_completed")
    cur = start = end - alloc + freed
    peak = start
    for e in trace:
        cur += {"alloc": e["size"], "free_completed": -e["size"]}.get(e["action"], 0)
        peak = max(peak, cur)
    assert led.curve()[-1] == end
    assert led.peak().bytes == peak == led.measured["peak_bytes"]

    # At the peak (inside Adam's first step), from the model's sizes:
    params = 4 * (64 * 128 + 128 + 128 * 10 + 10)          # 38,440 B of fp32 parameters
    at = led.at_peak()
    assert led.peak().phase == "optimizer"
    assert at["gradient"] == params                          # one .grad per parameter
    assert at["optimizer_state"] == 2 * params + 4 * 4       # exp_avg, exp_avg_sq, 4 steps
    assert at["other"] == params + 32 * 64 * 4 + 32 * 8      # made before profiling: params, x, y
