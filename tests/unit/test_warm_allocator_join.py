"""How `memledger trace` joins the allocator pass (Note [Warm allocator pass], cases 1-2),
without running a script: a stand-in worker whose status and records are written by hand.
The CUDA snapshot's rename is checked here because the development machines have no GPU."""

from __future__ import annotations

import json
from pathlib import Path

from memledger.errors import EXIT_OK
from memledger.outputs import partial_path
from memledger.trace.session import _join_allocator_pass


class _Done:
    """A finished allocator worker: its status, and its records at `out`."""

    def __init__(self, out: Path, status: dict) -> None:
        self.out = out
        self.status = status
        self.told: list[str] = []

    def result(self, go: str | None = None) -> dict:
        self.told.append(go)
        return self.status


def _setup(tmp_path: Path, steps: int) -> tuple[_Done, Path, Path, Path]:
    ledger = tmp_path / "run.ledger"
    partial = partial_path(ledger)
    partial.write_text('{"k": "header"}\n')
    snapshot = Path(str(ledger) + ".cuda-snapshot.pickle")
    partial_path(snapshot).write_bytes(b"snapshot")
    out = tmp_path / "measured.json"
    out.write_text(json.dumps({"steps": steps, "records": [
        {"k": "measured", "source": "cuda-allocator", "device": "cuda:0",
         "peak_bytes": 4096, "snapshot": str(partial_path(snapshot))}]}))
    worker = _Done(out, {"code": EXIT_OK, "reason": "stopped after the requested steps",
                         "steps": steps})
    return worker, ledger, partial, snapshot


def test_same_steps_kept_snapshot_under_its_own_name(tmp_path: Path) -> None:
    worker, ledger, partial, snapshot = _setup(tmp_path, steps=3)
    assert _join_allocator_pass(worker, 3, ledger, partial, snapshot) is True
    assert worker.told == ["go 3\n"]
    rec = json.loads(partial.read_text().splitlines()[-1])
    assert rec["peak_bytes"] == 4096 and rec["snapshot"] == str(snapshot)
    assert snapshot.read_bytes() == b"snapshot" and not partial_path(snapshot).exists()


def test_other_steps_dropped_with_the_reason(tmp_path: Path, capsys) -> None:
    # GIVEN the allocator pass measured 3 steps and the ledger pass traced 2
    worker, ledger, partial, snapshot = _setup(tmp_path, steps=3)
    assert _join_allocator_pass(worker, 2, ledger, partial, snapshot) is False
    assert worker.told == ["go 2\n"]
    # THEN nothing of it reaches the ledger, its snapshot is gone, and stderr says why
    assert partial.read_text() == '{"k": "header"}\n'
    assert not snapshot.exists() and not partial_path(snapshot).exists()
    assert capsys.readouterr().err == (
        "memledger: the allocator pass measured 3 step(s) where the ledger pass traced 2 "
        "(does the script run differently when traced?); the ledger has no measured peak\n")
