"""Note [A full temporary folder] (memledger/outputs.py): memledger's own files in a folder
with no room left fail in one line that names the folder and says what to do (exit 2),
never as the script's failure. A real full file system needs a mount; these tests make
the folder "full" by patching what memledger asks (`out_of_room`) or what the write meets
(ENOSPC), and run the real writers. The commands were also run against a 64 KiB tmpfs as
TMPDIR (docs/reliability.md)."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from memledger import outputs, processes
from memledger.errors import OutputError, ScriptError
from memledger.outputs import writing
from memledger.verify.capture import save_capture


def test_a_failed_capture_in_a_full_folder_is_a_full_disk_and_leaves_no_file(tmp_path,
                                                                              monkeypatch):
    # GIVEN torch.save failing half-way as its zip writer does on a short write
    path = tmp_path / "run.capture"

    def short_write(obj, f, *a, **k):
        f.write(b"PK" * 100)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 6016 "
                           "vs 5910")
    monkeypatch.setattr(torch, "save", short_write)
    monkeypatch.setattr(outputs, "out_of_room", lambda folder: True)
    # WHEN the capture is written THEN a one-line full-disk error names the folder
    with pytest.raises(OutputError, match=r"no space left on the device writing the gradient "
                                          r"capture in .*set TMPDIR to a folder with room"):
        with writing(path, "the gradient capture"):
            save_capture({"steps": []}, str(path))
    assert not path.exists()          # and the partial file is gone, its space back


def test_the_same_failure_with_room_left_is_not_called_a_full_disk(tmp_path, monkeypatch):
    def broken(obj, f, *a, **k):
        raise RuntimeError("a real bug")
    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(RuntimeError, match="a real bug"):
        with writing(tmp_path / "run.capture", "the gradient capture"):
            save_capture({}, str(tmp_path / "run.capture"))


def test_enospc_is_a_full_disk_whatever_the_free_space_says(tmp_path):
    with pytest.raises(OutputError, match="no space left"):
        with writing(tmp_path / "x", "x"):
            raise OSError(errno.ENOSPC, "No space left on device")


def test_a_worker_dead_without_status_in_a_full_folder_is_a_full_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs, "out_of_room", lambda folder: True)
    err = processes.dead_worker(1, tmp_path, "RuntimeError: unexpected pos")
    assert isinstance(err, OutputError) and err.exit_code == 2
    assert str(tmp_path) in str(err) and "TMPDIR" in str(err)
    monkeypatch.setattr(outputs, "out_of_room", lambda folder: False)
    err = processes.dead_worker(1, tmp_path, "RuntimeError: boom")
    assert isinstance(err, ScriptError) and err.exit_code == 3
    assert str(err).endswith("(os._exit in the script?): RuntimeError: boom")


def test_offloads_copies_on_a_full_disk_say_so(tmp_path, monkeypatch):
    from memledger.measure.offload import _SlotFile

    slots = _SlotFile(str(tmp_path))

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OutputError, match=r"offload's copies in .*its file needed 4,096 bytes"):
        slots.write(0, memoryview(bytes(4096)))
    slots.close()


def test_a_full_disk_inside_the_script_is_not_the_scripts_failure(tmp_path):
    # memledger's offloader raises inside the script's forward: exit 2, its one line
    from memledger.trace.script import run_and_classify

    script = tmp_path / "train.py"
    script.write_text("from memledger.errors import OutputError\n"
                      "raise OutputError(\"memledger: no space left on the device writing "
                      "offload's copies in '/tmp'\")\n")
    out = run_and_classify(script, [])
    assert out.code == 2 and out.reason.startswith("no space left on the device")
