"""`memledger import`: a hand-built CUDA snapshot (no GPU) and a malicious pickle."""

import os
import pickle

import pytest

from memledger.cli import main
from memledger.errors import MemledgerError
from memledger.importers.cuda_snapshot import import_snapshot, snapshot_records
from memledger.importers.safe_pickle import UnsafePickleError, loads_plain
from memledger.ledger.model import Ledger

TORCH = "/venv/lib/python3.11/site-packages/torch"
MIB = 2**20


def fr(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


def ev(action, addr, size, frames=()):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "frames": list(frames)}


def snapshot() -> dict:
    """Events 0..12 of device 0; see test_curve_and_categories for the arithmetic."""
    apply_ = [fr(f"{TORCH}/nn/modules/module.py", 900, "_apply"), fr("train.py", 10, "<module>")]
    fwd = [fr(f"{TORCH}/nn/modules/linear.py", 125, "forward"), fr("train.py", 20, "forward")]
    init = [fr(f"{TORCH}/optim/adam.py", 160, "_init_group"), fr("train.py", 40, "<module>")]
    upd = [fr(f"{TORCH}/optim/adam.py", 390, "_single_tensor_adam")]
    trace = [
        ev("segment_alloc", 0x1000, 2 * MIB),        # 0
        ev("alloc", 0x1000, 512, apply_),            # 1 A: model.to("cuda") -> parameter
        ev("alloc", 0x1200, 1024, fwd),              # 2 B: forward
        ev("alloc", 0x1600, 2048),                   # 3 C: no Python frames after forward
        ev("free_requested", 0x1200, 1024, fwd),     # 4
        ev("free_completed", 0x1200, 1024, fwd),     # 5 B freed in backward -> activation
        ev("alloc", 0x1200, 512, init),              # 6 D: Adam state
        ev("alloc", 0x1400, 256, upd),               # 7 E: optimizer scratch
        ev("free_requested", 0x1400, 256, upd),      # 8
        ev("free_completed", 0x1400, 256, upd),      # 9
        ev("free_requested", 0x9000, 4096),          # 10 X: allocated before recording
        ev("free_completed", 0x9000, 4096),          # 11
        {"action": "oom", "size": 8 * MIB, "device_free": 1024, "stream": 0, "frames": []},
    ]
    blocks = [{"address": a, "size": s, "requested_size": s, "state": st, "frames": []}
              for a, s, st in [(0x1000, 512, "active_allocated"), (0x1200, 512,
                               "active_allocated"), (0x1400, 512, "inactive"),
                               (0x1600, 2048, "active_allocated"),
                               (0x1e00, 128, "active_allocated")]]   # F: no alloc in trace
    seg = {"device": 0, "address": 0x1000, "total_size": 2 * MIB, "allocated_size": 3200,
           "active_size": 3200, "stream": 0, "segment_type": "large",
           "segment_pool_id": (0, 0), "blocks": blocks}
    return {"segments": [seg], "device_traces": [trace], "allocator_settings": {}}


@pytest.fixture
def led() -> Ledger:
    return Ledger.from_records(snapshot_records(snapshot(), "snap.pickle"))


def test_curve_and_categories(led):
    # pre-existing X 4096 [0,11) and F 128 [0,13): 4224 from event 0
    # +A 512 -> 4736, +B 1024 -> 5760, +C 2048 -> 7808 (ev 3, the peak), B freed at 5 -> 6784,
    # +D 512 -> 7296, +E 256 -> 7552, E freed at 9 -> 7296, X freed at 11 -> 3200
    assert led.curve().tolist() == [4224, 4736, 5760, 7808, 7808, 6784, 7296, 7552, 7552,
                                    7296, 7296, 3200, 3200]
    pk = led.peak()
    assert (pk.bytes, pk.event, pk.phase) == (7808, 3, "backward")
    at = led.at_peak()
    # other = X 4096 + F 128; parameter A; activation B; gradient C (made in backward, kept)
    assert {c: b for c, b in at.items() if b} == {
        "other": 4224, "parameter": 512, "activation": 1024, "gradient": 2048}
    cats = dict(zip(led.storages["bytes"].astype(str) + led.storages["op"],
                    led.storages["category"]))
    assert cats["512adam.py:160:_init_group"] == "optimizer_state"
    assert cats["256adam.py:390:_single_tensor_adam"] == "temporary"
    saved = led.storages[led.storages["category"] == "activation"]
    assert saved["saved_module"].tolist() == ["train.py:20:forward"]


def test_allocator_view_and_oom(led):
    m = led.measured
    # allocated at the end = A 512 + C 2048 + D 512 + F 128 = 3200; reserved = one 2 MiB segment
    assert m["source"] == "cuda-snapshot" and m["device"] == "cuda:0"
    assert (m["peak_bytes"], m["allocated"], m["reserved"]) == (7808, 3200, 2 * MIB)
    assert m["fragmentation_bytes"] == 2 * MIB - 3200            # 2093952
    assert m["fragmentation"] == round(2093952 / 2097152, 6)      # 0.998474
    assert led.workspace_bytes() == 0          # the ledger is the allocator's own curve
    assert led.end["status"] == "oom" and not led.complete
    assert led.extra["oom"][0]["bytes"] == 8 * MIB
    assert led.phases["phase"].tolist() == ["setup", "forward", "backward", "optimizer"]
    assert led.phases["ev"].tolist() == [0, 2, 3, 6]
    assert led.steps[["step", "ev"]].values.tolist() == [[1, 12]]


def test_import_cli_writes_a_readable_ledger(tmp_path, capsys):
    src = tmp_path / "snap.pickle"
    src.write_bytes(pickle.dumps(snapshot()))
    out = tmp_path / "run.ledger"
    assert main(["import", str(src), "-o", str(out)]) == 0
    assert Ledger.load(out).peak().bytes == 7808
    assert main(["show", str(out), "--json"]) == 0


def test_free_requested_only_traces_free_at_the_request():
    snap = {"segments": [], "device_traces": [[
        ev("alloc", 1, 100, [fr("train.py", 1, "forward")]), ev("alloc", 2, 50),
        ev("free_requested", 1, 100)]]}
    led = Ledger.from_records(snapshot_records(snap))
    assert led.curve().tolist() == [100, 150, 50]    # 100; +50; -100 at the request


class Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_malicious_pickle_is_refused_before_running(tmp_path):
    marker = tmp_path / "pwned"
    src = tmp_path / "snap.pickle"
    src.write_bytes(pickle.dumps({"segments": [], "device_traces": [[Evil(marker)]]}))
    with pytest.raises(UnsafePickleError, match=r"asks for the Python object posix\.system"):
        import_snapshot(src, tmp_path / "x.ledger")
    assert not marker.exists()
    # through the CLI: one clear line, exit 2 (bad input), nothing written
    assert main(["import", str(src), "-o", str(tmp_path / "y.ledger")]) == 2
    assert not marker.exists() and not (tmp_path / "y.ledger").exists()


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_plain_data_loads_at_every_protocol(protocol):
    data = {"a": [1, 2.5, None, True], "pool": (0, 1), "b": b"x", "s": {"k": "v"}}
    assert loads_plain(pickle.dumps(data, protocol=protocol)) == data


def test_not_a_snapshot_and_not_a_pickle(tmp_path):
    with pytest.raises(MemledgerError, match="not a CUDA memory snapshot"):
        snapshot_records([1, 2, 3], "list.pickle")
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"not a pickle at all")
    with pytest.raises(MemledgerError, match="is not a readable pickle"):
        import_snapshot(bad, tmp_path / "x.ledger")


def test_user_frames_after_forward_are_loss_after_optimizer_other():
    user = [fr("train.py", 30, "<module>")]
    snap = {"segments": [], "device_traces": [[
        ev("alloc", 1, 100, [fr("train.py", 20, "forward")]),       # 0 forward
        ev("alloc", 2, 10, user),                                    # 1 loss
        ev("alloc", 3, 50),                                          # 2 backward (no frames)
        ev("alloc", 4, 8, [fr(f"{TORCH}/optim/sgd.py", 80, "_single_tensor_sgd")]),  # 3
        ev("alloc", 5, 64, user),                                    # 4 next batch: other
        ev("alloc", 6, 100, [fr("train.py", 20, "forward")]),       # 5 forward of step 2
    ]]}
    led = Ledger.from_records(snapshot_records(snap))
    assert led.phases[["ev", "phase", "step"]].values.tolist() == [
        [0, "setup", 1], [0, "forward", 1], [1, "loss", 1], [2, "backward", 1],
        [3, "optimizer", 1], [4, "other", 2], [5, "forward", 2]]
    assert led.steps[["step", "ev"]].values.tolist() == [[1, 3]]  # step 1 ended after ev 3
    # the SGD buffer made in optimizer.step() and alive at the end is optimizer state
    assert led.storages.set_index("created").loc[3, "category"] == "optimizer_state"
    assert led.storages.set_index("created").loc[4, "category"] == "temporary"


def test_imported_ledger_feeds_report_timeline_and_perfetto(led):
    from io import StringIO

    from rich.console import Console

    from memledger.report.html_data import report_data
    from memledger.report.perfetto import trace_events
    from memledger.report.timeline import render_timeline

    d = report_data(led, "snap")
    assert d["peak"]["bytes"] == 7808 and d["measured"]["source"] == "cuda-snapshot"
    assert d["device"] == "cuda:0"
    con = Console(file=StringIO(), width=60, color_system=None)
    con.print(render_timeline(led, width=60))
    assert "peak 7.6 KiB at event 3 (step 1, backward)" in con.file.getvalue()   # 7808/1024
    [peak] = [e for e in trace_events(led) if e["ph"] == "i"]
    assert peak["args"]["bytes"] == 7808


def test_cpp_frames_of_the_autograd_engine_mean_backward():
    # _record_memory_history(stacks="all") (what `memledger trace` uses on CUDA) records C++
    # frames too: backward shows the engine's frames instead of an empty stack.
    engine = fr("/pytorch/torch/csrc/autograd/engine.cpp", 1107,
                "torch::autograd::Engine::evaluate_function(...)")
    accum = fr("/pytorch/torch/csrc/autograd/functions/accumulate_grad.h", 60,
               "torch::autograd::AccumulateGrad::accumulateGrad(...)")
    kernel = fr("/pytorch/aten/src/ATen/native/Linear.cpp", 90, "at::native::linear(...)")
    snap = {"segments": [], "device_traces": [[
        ev("alloc", 1, 100, [kernel, fr("train.py", 20, "forward")]),    # 0 forward
        ev("alloc", 2, 30, [kernel, engine]),                            # 1 backward scratch
        ev("alloc", 3, 40, [accum, engine]),                             # 2 a .grad
        ev("free_completed", 2, 30, [kernel, engine]),                   # 3
        ev("free_completed", 3, 40, [accum, engine]),                    # 4 freed in backward
    ]]}
    led = Ledger.from_records(snapshot_records(snap))
    cats = led.storages.set_index("created")["category"].to_dict()
    # AccumulateGrad makes a gradient even when it is freed inside backward
    assert cats == {0: "temporary", 1: "temporary", 2: "gradient"}
    assert led.phases["phase"].tolist() == ["setup", "forward", "backward"]
    assert led.storages.set_index("created").loc[0, "module"] == "train.py:20:forward"
