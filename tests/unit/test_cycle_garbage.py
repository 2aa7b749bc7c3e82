"""Tensors only Python's garbage collector frees: the ledger marks the frees the collector
made (memledger/trace/gc_window.py) and the summary counts them; the doctor names the cycle
(Note [Tensors only the garbage collector frees], tests/integration/test_doctor_scripts.py)."""

from __future__ import annotations

import contextlib
import gc
import io

import torch

import memledger
from memledger.ledger.summary import summarize
from memledger.report.terminal import _headline


class _Cycle:
    """Holds a tensor and itself: only the collector frees it."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t, self.me = t, self


def _steps(n: int, collect: bool) -> None:
    torch.manual_seed(0)
    fc = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(fc.parameters(), lr=0.1)
    for _ in range(n):
        h = fc(torch.randn(8, 32))
        _Cycle(h.detach().clone())          # 8 x 32 float32 = 1,024 B, held by a cycle
        h.sum().backward()
        if collect:
            gc.collect()                    # the collector frees this step's cycle
        opt.step()
        opt.zero_grad()


def test_frees_the_collector_made_are_marked_and_counted(tmp_path):
    gc.collect()
    with memledger.trace(tmp_path / "gc.ledger") as led:
        _steps(3, collect=True)
    st = led.ledger.storages
    by_gc = st[st["gc_freed"]]
    assert list(by_gc["op"]) == ["clone.default"] * 3 and list(by_gc["bytes"]) == [1024] * 3
    assert not st[~st["gc_freed"] & (st["op"] == "clone.default")].size
    g = led.summary().cycle_garbage
    assert (g.storages, g.bytes) == (3, 3 * 1024)


def test_no_collector_frees_no_line(tmp_path):
    # the collector off while it runs: where this is the process's first in-process trace
    # (the test alone, or first on its xdist worker), what the trace imports and makes on
    # first use reached the collector's threshold, and an automatic collection freed step
    # 1's cycle (CycleGarbage(storages=1, bytes=1024)); after an earlier trace it did not
    gc.collect()
    was_on = gc.isenabled()
    gc.disable()
    try:
        with memledger.trace(tmp_path / "plain.ledger") as led:
            _steps(2, collect=False)
    finally:
        if was_on:
            gc.enable()
    assert led.summary().cycle_garbage is None
    assert not any("garbage collector" in str(x) for x in _headline(led.summary(), ""))


def _trace(*argv: str) -> None:
    """`memledger trace ARGV` through `memledger.cli.main` in this process: its passes run
    in workers as from the command, and the command's own interpreter (0.4-1.4 s of CPU in
    imports) is the pytest process (Note [The reading verbs in the pytest process],
    tests/conftest.py)."""
    from memledger.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["trace", *argv]) == 0


def test_memledger_trace_lists_the_garbage_left_at_the_end(tmp_path, cli_zygote):
    """tests/doctor/garbage.py --cycle ctx: a Function keeps each step's 64x256 float32
    output as `ctx.out`; with no collection in 3 steps, steps 1 and 2's outputs are garbage
    at the end (step 3's is still reachable through `loss`), idle at the peak. `--no-gc`:
    whether an automatic collection ran in those steps followed how many objects the tracer
    made (a change to the collector's per-call work flipped it: docs/decisions.md,
    speed43)."""
    from pathlib import Path

    from memledger.ledger.model import Ledger

    script = Path(__file__).resolve().parents[1] / "doctor" / "garbage.py"
    out = tmp_path / "ctx.ledger"
    _trace("--no-measure", "--steps", "3", "-o", str(out), str(script), "--", "--cycle", "ctx",
           "--no-gc")
    led = Ledger.load(out)
    st = led.storages
    gone = st[st["garbage_at_end"]]
    assert list(gone["op"]) == ["mul.Tensor"] * 2 and list(gone["bytes"]) == [65536] * 2
    g = summarize(led).cycle_garbage
    assert (g.storages, g.at_end_storages, g.at_end_bytes) == (0, 2, 131072)
    assert g.at_peak_bytes == 131072
    from memledger.commands.predict import garbage_line   # predict says they may move
    assert garbage_line(led).startswith("128.0 KiB at the traced peak were tensors held by "
                                        "reference cycles after their last use")


def test_a_dead_weakref_proxy_among_the_garbage_is_left_alone():
    """Lightning leaves `weakref.proxy` objects in its garbage; one whose referent is gone
    raises ReferenceError on `isinstance` (the ledger pass of tests/clients/
    train_lightning.py once failed at its close)."""
    import weakref

    from memledger.trace.doctor_garbage import GarbageWatch
    from memledger.trace.gc_window import garbage_sids

    class Referent:
        pass

    def dead_proxy_in_a_cycle(payload):
        r = Referent()
        cycle = [weakref.proxy(r), payload]
        cycle.append(cycle)

    gc.collect()
    dead_proxy_in_a_cycle(torch.zeros(256))
    assert garbage_sids({}) == []
    gc.collect()   # garbage_sids leaves what it listed to the next collection
    dead_proxy_in_a_cycle(torch.zeros(256))
    (rec,) = GarbageWatch().boundary(1)
    assert (rec["bytes"], rec["tensors"], rec["kind"]) == (1024, 1, "other")


def test_saves_of_a_validation_without_no_grad_went_unread(tmp_path, cli_zygote):
    """tests/doctor/eval_mode.py --fixed --grad-validation validates on 2 batches of 4 x 8
    after each step without torch.no_grad(): its ops save the batch and two activations
    (3 x 128 B a batch: randn, addmm, relu) for a backward that never comes. Traced 3 steps:
    the validations after steps 1 and 2, 12 storages, 1,536 B, none at the peak (step 3's
    training forward). The doctor names the line (test_doctor_scripts.py)."""
    from pathlib import Path

    from memledger.ledger.model import Ledger

    script = Path(__file__).resolve().parents[1] / "doctor" / "eval_mode.py"
    out = tmp_path / "val.ledger"
    _trace("--no-measure", "--steps", "3", "-o", str(out), str(script), "--", "--fixed",
           "--grad-validation")
    u = summarize(Ledger.load(out)).unread_saves
    assert (u.storages, u.bytes, u.at_peak_bytes) == (12, 1536, 0)


def test_a_hop_through_an_instance_attribute_is_named():
    """Python 3.11 visits an instance's attributes without their dict, so a cycle's path
    goes from the object straight to the value: torch's `GradScaler.scale([...])` leaves a
    cycle through a `_MultiDeviceReplicator`, whose hop read "_MultiDeviceReplicator →  →
    [device(type='cpu')] Tensor(scalar float32)" (tests/clients/train_torchjd.py --mode
    amp); it reads "→ ._per_device_tensors → [...]" now."""
    from memledger.trace.doctor_garbage import _hop

    class Holder:
        def __init__(self) -> None:
            self.per_device = {"cpu": 1}

    h = Holder()
    assert _hop(h, h.per_device) == ".per_device"
