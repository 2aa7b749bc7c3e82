"""Ledgers written by the Python API, the rank launcher and the doctor appear whole at their
path or not at all (memledger/outputs.py): the writers stream into a partial file beside
it, renamed over it at the end. Each test stops the writer mid-way, cheaply (no real run
of the launcher or the doctor: their process is replaced by a stand-in that writes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import memledger
from memledger.errors import OutputError
from memledger.outputs import partial_path

OLD = '{"k":"header","schema":"memledger.ledger/1","old":true}\n'   # an earlier ledger


def _partials(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.partial"))


def test_api_streams_beside_the_path_and_renames_at_the_end(tmp_path):
    # GIVEN an earlier ledger at the path WHEN a block traces into it
    path = tmp_path / "run.ledger"
    path.write_text(OLD)
    model = torch.nn.Linear(4, 2)
    with memledger.trace(path) as led:
        model(torch.randn(3, 4)).sum().backward()
        # THEN while it runs the path still holds the earlier ledger, the records go beside it
        assert path.read_text() == OLD
        assert _partials(tmp_path) == [partial_path(path)]
    # ... and at the end the new ledger is the path, whole, and nothing is left beside it
    assert json.loads(path.read_text().splitlines()[-1])["k"] == "end"
    assert _partials(tmp_path) == [] and led.summary().peak.bytes > 0


def test_api_rename_failing_leaves_the_earlier_ledger(tmp_path, monkeypatch):
    # GIVEN the final rename fails (a full disk, a vanished folder)
    path = tmp_path / "run.ledger"
    path.write_text(OLD)

    def fail(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OutputError, match="no space left"):
        with memledger.trace(path):
            torch.ones(3) + 1
    # THEN the earlier ledger is intact and what was recorded is kept beside it
    assert path.read_text() == OLD
    assert len(_partials(tmp_path)) == 1


def test_api_refuses_to_overwrite_a_file_that_is_no_ledger(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(OutputError, match="not a memledger ledger"):
        with memledger.trace(notes):
            pass
    assert notes.read_text() == "mine"


def test_rank_launcher_ranks_write_beside_their_ledgers(tmp_path, monkeypatch):
    # GIVEN a stand-in for torchrun whose rank 1 dies mid-write
    from memledger.trace import launch
    from memledger.trace.rank import for_rank

    script = tmp_path / "train.py"
    script.write_text("pass\n")
    out = tmp_path / "run.ledger"
    targets = [tmp_path / "run.rank0.ledger", tmp_path / "run.rank1.ledger"]
    targets[1].write_text(OLD)

    def fake_launch(nproc, args, timeout_s, quiet, module="memledger.trace.worker"):
        template, status = args[args.index("--out") + 1], args[args.index("--status") + 1]
        for r in range(nproc):
            Path(for_rank(template, r)).write_text(
                '{"k":"header","schema":"memledger.ledger/1"}\n{"k":"alloc"')  # torn line
            # the ranks never write the ledgers' own paths while they run
            assert not targets[0].exists() and targets[1].read_text() == OLD
            Path(for_rank(status, r)).write_text(json.dumps(
                {"code": 0 if r == 0 else 3, "reason": "killed", "steps": 0, "t": r}))
        return 1, ""
    monkeypatch.setattr(launch, "_launch", fake_launch)
    with pytest.raises(Exception, match="rank 1 failed"):
        launch.trace_ranks(script, [], out, nproc=2, steps=1, measure=False)
    # THEN each rank's record is renamed over its ledger (kept, as trace keeps a partial
    # ledger), and nothing is left beside them
    assert all(t.read_text().startswith('{"k":"header"') for t in targets)
    assert _partials(tmp_path) == []


def test_doctor_worker_writes_beside_the_ledger(tmp_path, monkeypatch):
    # GIVEN a stand-in for the doctor's worker process that dies after some records
    from memledger.doctor import run as doctor_run

    script = tmp_path / "train.py"
    script.write_text("pass\n")
    ledger = tmp_path / "run.ledger"
    ledger.write_text(OLD)
    seen = {}

    def dying_worker(module, args, capture_output=False):
        path = Path(args[args.index("--ledger") + 1])
        seen["path"] = path
        path.write_text('{"k":"header","schema":"memledger.ledger/1"}\n')
        seen["old_kept"] = ledger.read_text() == OLD   # while it writes
        return 137, b""
    monkeypatch.setattr(doctor_run, "run_worker", dying_worker)
    with pytest.raises(Exception, match="ended with status 137 before memledger finished"):
        doctor_run.doctor_script(script, [], steps=1, ledger=ledger)
    # THEN it wrote beside the ledger, never into it, and what it wrote is renamed over it
    assert seen["path"] == partial_path(ledger) and seen["old_kept"]
    assert ledger.read_text().startswith('{"k":"header","schema":"memledger.ledger/1"}')
    assert _partials(tmp_path) == []


def test_two_threads_writing_one_file_leave_one_whole_file(tmp_path):
    """A rank's hang watchdog and its main thread may write its status at once: each write
    is whole (a temporary per process and thread, then os.replace). With one temporary per
    process the launcher once read `{...}{...}` and failed with exit 70."""
    import json
    import threading

    from memledger.outputs import write_atomic

    path = tmp_path / "status.rank0.json"
    texts = [json.dumps({"code": 3, "reason": "x" * 5000}), json.dumps({"code": 130})]
    errors: list[BaseException] = []

    def writer(text: str) -> None:
        try:
            for _ in range(200):
                write_atomic(path, text, "status")
        except BaseException as e:   # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for _ in range(200):
        if path.exists():
            assert path.read_text() in texts
    for t in threads:
        t.join()
    assert errors == [] and path.read_text() in texts
    assert list(tmp_path.iterdir()) == [path]   # no temporary left
