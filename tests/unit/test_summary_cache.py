"""Note [The summary kept in the ledger]: `trace` appends the summary it printed; `show` reads
it back without pandas only while it still holds, and otherwise reads the ledger whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import memledger
from memledger.cli import main
from memledger.commands.common import kept_summary, summarize_and_keep
from memledger.ledger import summary_cache
from memledger.ledger.model import Ledger
from memledger.ledger.reader import read_records
from tests.unit.test_ledger_model import RECORDS


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _show_json(path: Path, capsys, *args: str) -> dict:
    capsys.readouterr()
    assert main(["show", str(path), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def kept(tmp_path) -> Path:
    """The hand-written ledger of test_ledger_model, its summary kept."""
    path = _write(tmp_path / "small.ledger", RECORDS)
    summarize_and_keep(path)
    return path


def test_the_kept_summary_is_the_summary(kept, tmp_path, capsys):
    # GIVEN a ledger whose summary was kept WHEN it is shown THEN it reads exactly as the
    # same ledger without the record (which is computed from the ledger)
    plain = _write(tmp_path / "plain.ledger", RECORDS)
    last = read_records(kept)[0][-1]
    assert last["k"] == "summary" and last["top"] == 10
    assert last["of"] == plain.stat().st_size
    assert kept_summary(kept) == Ledger.load(plain).summary()
    assert _show_json(kept, capsys) == _show_json(plain, capsys)
    # the record is one the model ignores: the ledger itself reads as before
    assert Ledger.load(kept).peak() == Ledger.load(plain).peak()


def test_a_real_trace_and_a_fake_one_round_trip(trace_example, tmp_path):
    # every field of a real summary (measured, scratch, idle rows) and a fake one (FakeRun)
    # comes back equal from the record
    import torch

    real = shutil.copy(trace_example("mlp", steps=3), tmp_path / "mlp.ledger")
    fake = tmp_path / "fake.ledger"
    with memledger.trace(fake, fake=True):
        model = torch.nn.Linear(64, 8)
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(4, 64)).sum().backward()
        opt.step()
    for path in (Path(real), fake):
        computed = summarize_and_keep(path)
        assert kept_summary(path) == computed
    assert kept_summary(fake).fake is not None


@pytest.mark.parametrize("change", ["byte", "appended", "code", "top", "record"])
def test_a_summary_that_no_longer_holds_is_not_used(kept, capsys, monkeypatch, change):
    # GIVEN a kept summary WHEN the ledger or the code changed under it THEN show reads the
    # ledger whole and prints what the ledger now says
    top = 10
    if change == "byte":        # same length, still JSON: only the digest sees it
        data = kept.read_bytes()
        assert data.count(b'"bytes": 2000') == 1   # the optimizer state
        kept.write_bytes(data.replace(b'"bytes": 2000', b'"bytes": 2001'))
    elif change == "appended":  # a record after it (a newer writer's, say)
        with kept.open("a") as f:
            f.write(json.dumps({"k": "note", "text": "later"}) + "\n")
    elif change == "code":      # another memledger summarized it
        monkeypatch.setattr(summary_cache, "code_digest", lambda: "another")
    elif change == "top":
        top = 3
    elif change == "record":    # the record itself edited by hand
        data = kept.read_bytes()
        kept.write_bytes(data.replace(b'"steps_traced":', b'"steps_traced_":'))
    assert kept_summary(kept, top) is None
    assert (summary_cache.load(kept, top) is None) == (change != "record")   # it fails to validate
    shown = _show_json(kept, capsys, "--top", str(top))
    assert shown == Ledger.load(kept).summary(top=top).to_json_dict()


def test_a_corrupt_line_is_still_an_error(kept, capsys):
    data = kept.read_bytes()
    kept.write_bytes(data.replace(b'{"k": "free"', b'{"k": "free"!', 1))
    assert main(["show", str(kept)]) == 2
    assert "corrupt" in capsys.readouterr().err


@pytest.mark.parametrize("why", ["partial", "doctored"])
def test_no_summary_kept_for_a_partial_or_doctored_ledger(tmp_path, why):
    # a partial ledger is shown with its note and a doctored one with its findings: both
    # are read whole
    recs = [r for r in RECORDS if r["k"] != "end"] if why == "partial" else \
        RECORDS + [{"k": "doctor", "schema": "memledger.doctor/1", "steps": 1, "ok": True}]
    path = _write(tmp_path / f"{why}.ledger", recs)
    before = path.read_bytes()
    summarize_and_keep(path)
    assert path.read_bytes() == before
    assert summary_cache.record_line(before, {}, top=10) is not None   # the caller decides


def test_a_ledger_that_cannot_be_opened_for_appending_is_left_as_it_is(tmp_path, monkeypatch):
    # (a read-only file: the summary is a convenience, never an error)
    import os

    path = _write(tmp_path / "ro.ledger", RECORDS)
    before = path.read_bytes()

    def refuse(*args, **kwargs):
        raise PermissionError("read-only")
    monkeypatch.setattr(os, "open", refuse)
    assert summarize_and_keep(path) == Ledger.load(path).summary()
    assert path.read_bytes() == before
    assert summary_cache.record_line(before[:-1], {}, top=10) is None   # cut off: none


@pytest.mark.parametrize("how", ["half", "none"])
def test_a_full_disk_leaves_the_ledger_as_it_was(tmp_path, monkeypatch, how):
    # GIVEN the disk fills while the record is written (half of it, or none) THEN the
    # ledger is cut back to its own bytes: complete, no half line for a reader to trip on
    import os

    path = _write(tmp_path / "full.ledger", RECORDS)
    before = path.read_bytes()
    write = os.write

    def full_disk(fd, buf):
        if how == "half":
            write(fd, bytes(buf)[:len(buf) // 2])
            return len(buf) // 2
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "write", full_disk)
    assert summarize_and_keep(path) == Ledger.load(path).summary()
    assert path.read_bytes() == before


def test_a_ledger_renamed_over_meanwhile_gets_no_summary(tmp_path, monkeypatch):
    # GIVEN two traces writing one output name WHEN the other's ledger is renamed over the
    # name while this one summarizes THEN the summary goes with the bytes it was computed
    # from (the file this trace opened, now unlinked), never onto the other's ledger
    import os

    path = _write(tmp_path / "run.ledger", RECORDS)
    other = _write(tmp_path / "other.ledger", [r for r in RECORDS if r["k"] != "measured"])
    expected = other.read_bytes()
    summary = Ledger.summary

    def summary_while_renamed(self, top=10):
        os.replace(other, path)
        return summary(self, top)
    monkeypatch.setattr(Ledger, "summary", summary_while_renamed)
    summarize_and_keep(path)
    assert path.read_bytes() == expected and summary_cache.load(path, 10) is None


def test_two_traces_that_read_one_file_keep_one_summary(tmp_path):
    # GIVEN two traces that opened the same ledger (the other's rename came first) WHEN
    # both append THEN the second finds bytes appended since it read and keeps none
    import os

    path = _write(tmp_path / "run.ledger", RECORDS)
    fds = [os.open(path, os.O_RDWR | os.O_APPEND) for _ in range(2)]
    try:
        datas = [summary_cache.read_all(fd) for fd in fds]
        summary = Ledger.load(path).summary().model_dump(mode="json", by_alias=True)
        assert summary_cache.append(fds[0], datas[0], summary, top=10) is True
        assert summary_cache.append(fds[1], datas[1], summary, top=10) is False
    finally:
        for fd in fds:
            os.close(fd)
    kinds = [json.loads(ln)["k"] for ln in path.read_text().splitlines()]
    assert kinds.count("summary") == 1 and kinds[-1] == "summary"
    assert kept_summary(path) == Ledger.load(path).summary()
