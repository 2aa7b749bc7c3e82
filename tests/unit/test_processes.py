"""Worker processes started warm, from a zygote, and cold (Note [Warm starts],
memledger/processes.py): the same start, the same exits, the same streams."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memledger import processes
from memledger.processes import run_worker, several_workers, start_worker

ROOT = Path(__file__).resolve().parents[2]
ECHO = "tests.unit.echo_worker"

pytestmark = pytest.mark.skipif(not processes.warm_starts_possible(),
                                reason="warm starts need Linux without an NVIDIA driver")


@pytest.fixture(autouse=True)
def _from_root(monkeypatch):
    monkeypatch.chdir(ROOT)   # `python -m tests.unit.echo_worker` resolves from here
    monkeypatch.setenv("MEMLEDGER_WARM_START", "1")


def _state() -> dict:
    code, out = run_worker(ECHO, ["state", "a b"], capture_output=True)
    assert code == 0, out
    return json.loads(out.decode().strip().splitlines()[-1])


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_a_warm_child_starts_where_a_fresh_process_starts(monkeypatch, tmp_path):
    warm1, warm2 = _state(), _state()
    monkeypatch.setenv("MEMLEDGER_WARM_START", "0")
    cold, cold2 = _state(), _state()
    # the zygote's children had torch before their first line, the cold one did not; a
    # warm child is the zygote's child, a cold one ours
    assert (warm1["warm"], warm2["warm"], cold["warm"]) == (True, True, False)
    assert warm1["ppid"] == warm2["ppid"] != os.getpid() == cold["ppid"]
    # the zygote froze its imports for the garbage collector (Note [Objects from before
    # the script] in memledger/trace/script.py); a fresh process has frozen nothing
    assert warm1["frozen"] > 100_000 and cold["frozen"] == 0
    # torch's default generator: as in fresh processes, the same seed in each (older
    # torch) or a seed of its own (torch 2.13 draws it from the OS)
    assert (warm1["torch"] == warm2["torch"]) == (cold["torch"] == cold2["torch"])
    # numpy's and Python's global generators: fresh from the OS in each child
    assert warm1["numpy"] != warm2["numpy"] and warm1["random"] != warm2["random"]
    for s in (warm1, warm2, cold):   # as `python -m` started from here, with these args
        assert (s["cwd"], s["path0"], s["argv"], s["stdout_tty"]) == (
            str(ROOT), str(ROOT), ["state", "a b"], False)


def test_the_environment_and_folder_at_launch_are_the_childs(monkeypatch, tmp_path):
    # another environment than the zygote's: a zygote of its own, which started with it
    monkeypatch.setenv("ECHO_VAR", "set")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.chdir(tmp_path)
    s = _state()
    assert (s["var"], s["cwd"], s["path0"], s["warm"]) == ("set", str(tmp_path),
                                                          str(tmp_path), True)
    assert len(processes._zygotes) <= processes._MAX_ZYGOTES


@pytest.mark.parametrize("warm", ["1", "0"])
def test_exit_status_and_output_as_python_gives_them(monkeypatch, warm):
    monkeypatch.setenv("MEMLEDGER_WARM_START", warm)
    assert run_worker(ECHO, ["echo", "x"], capture_output=True) == (0, b"out x\nerr x\n")
    assert run_worker(ECHO, ["exit", "3"], capture_output=True)[0] == 3
    code, out = run_worker(ECHO, ["raise"], capture_output=True)
    assert code == 1 and out.decode().strip().endswith("ValueError: broke on purpose")
    w = start_worker(ECHO, ["reverse"], capture_output=True, stdin_pipe=True)
    assert w.communicate(b"go 3\n") == b"3 og\n" and w.returncode == 0
    w.close()


@pytest.mark.parametrize("warm", ["1", "0"])
def test_a_signal_ends_the_worker_and_its_status_says_which(monkeypatch, warm):
    monkeypatch.setenv("MEMLEDGER_WARM_START", warm)
    w = start_worker(ECHO, ["sleep"], capture_output=True)
    time.sleep(0.2)
    assert w.poll() is None
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=30) == -signal.SIGTERM and w.poll() == -signal.SIGTERM
    w.kill()   # no-op on an ended worker
    w.close()


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_by_default_only_workers_started_one_after_another_are_warm(monkeypatch):
    monkeypatch.delenv("MEMLEDGER_WARM_START")
    assert _state()["warm"] is False            # `trace`: its two passes start cold
    with several_workers():                     # `compare`, `plan --measure`
        assert _state()["warm"] is True
    assert _state()["warm"] is False


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie waiting for whoever adopted it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):   # gone before the open, or the read
        return True


def test_workers_end_with_the_process_that_started_them():
    # our end of the socket closes (as at our exit, or when we are killed): the zygote
    # exits, and its death sends each running child SIGTERM (PR_SET_PDEATHSIG)
    w = start_worker(ECHO, ["sleep"], capture_output=True)
    time.sleep(0.2)
    assert w.poll() is None
    processes._close_all()
    deadline = time.monotonic() + 30
    while not _gone(w.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(w.pid)
    w.close()


# ---- Note [Warm ranks] (memledger/warm_rank.py) ------------------------------------------------

@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_torchruns_ranks_are_forked_warm_and_run_as_ranks():
    from memledger.trace.launch import _launch

    code, out = _launch(2, ["state", "a b"], 60, quiet=True, module=ECHO)
    states = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert code == 0, out
    assert sorted(s["rank"] for s in states) == ["0", "1"]
    # each rank's worker had torch before its first line, and is the zygote's child, not
    # the stand-in's that torchrun started
    assert all(s["warm"] and s["argv"] == ["state", "a b"] for s in states), states
    assert states[0]["ppid"] == states[1]["ppid"]


def test_a_failed_rank_fails_the_launch_warm_or_cold(monkeypatch):
    from memledger.trace.launch import _launch

    assert _launch(2, ["exit", "3"], 60, quiet=True, module=ECHO)[0] == 1
    monkeypatch.setenv("MEMLEDGER_WARM_START", "0")
    assert _launch(2, ["exit", "3"], 60, quiet=True, module=ECHO)[0] == 1


def _stand_in(args: list[str], **env) -> subprocess.Popen:
    address = processes.zygote_address(dict(os.environ))
    assert address is not None
    return subprocess.Popen([sys.executable, "-m", "memledger.warm_rank", ECHO, *args],
                            env={**os.environ, "MEMLEDGER_ZYGOTE": address, "RANK": "1",
                                 "MASTER_PORT": "29555", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_a_rank_whose_environment_differs_otherwise_starts_cold():
    # torchrun's own variables may differ from the zygote's environment; anything else
    # could change what an import did, so that rank becomes `python -m` itself
    warm = json.loads(_stand_in(["state", "x"]).communicate()[0].splitlines()[-1])
    cold = json.loads(_stand_in(["state", "x"], ECHO_VAR="other").communicate()[0]
                      .splitlines()[-1])
    assert (warm["warm"], warm["rank"]) == (True, "1")
    assert (cold["warm"], cold["var"], cold["rank"]) == (False, "other", "1")


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + 30
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _gone(pid)


def _pid_from(path: Path) -> int:
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(path.read_text())


def test_a_stand_ins_signals_reach_its_worker_and_its_death_ends_it(tmp_path):
    # torchrun stops ranks with SIGTERM: the worker gets it and the stand-in ends as it did
    rank = _stand_in(["sleep", str(tmp_path / "a")])
    worker = _pid_from(tmp_path / "a")
    assert worker != rank.pid
    rank.send_signal(signal.SIGTERM)
    assert rank.wait(timeout=30) == -signal.SIGTERM and _wait_gone(worker)
    # a stand-in killed outright (torchrun's SIGKILL after its grace): the zygote sends its
    # worker SIGTERM, as a dead parent's PDEATHSIG does for a cold rank
    rank = _stand_in(["sleep", str(tmp_path / "b")])
    worker = _pid_from(tmp_path / "b")
    rank.kill()
    rank.wait(timeout=30)
    assert _wait_gone(worker)


# ---- Note [Warm starts], 7: another process's zygote ------------------------------------------

# a memledger of its own: starts one worker and prints its state
_ANOTHER = ("import sys; from memledger.processes import run_worker; "
            "code, out = run_worker('tests.unit.echo_worker', ['state', 'x'], "
            "capture_output=True); sys.stdout.write(out.decode())")


def _state_in_another_process(**env) -> dict:
    out = subprocess.run([sys.executable, "-c", _ANOTHER], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_another_memledger_forks_its_workers_from_the_zygote_it_is_given(tmp_path):
    ours = _state()["ppid"]                      # this process's zygote
    address = processes.zygote_address(dict(os.environ))
    joined = _state_in_another_process(MEMLEDGER_ZYGOTE=address, COLUMNS="123")
    assert (joined["warm"], joined["ppid"]) == (True, ours)   # the terminal's size may differ
    # another environment: that zygote refuses it (the process starts one of its own); a
    # zygote that is gone: the same
    env = {**os.environ, "MEMLEDGER_ZYGOTE": address}
    served = processes._Zygote.join(env)
    assert served is not None
    served.close()
    assert processes._Zygote.join({**env, "ECHO_VAR": "other"}) is None
    assert processes._Zygote.join({**env, "MEMLEDGER_ZYGOTE": str(tmp_path / "gone")}) is None


def test_the_zygotes_imports_make_no_console():
    # COLUMNS and LINES may differ between a zygote and its children (VOLATILE_ENV): they are
    # read when something is printed, and the zygote's imports do not even import rich's
    # console (should they one day, see that none is made at import, then change this)
    assert _state()["console"] is False
    assert {"COLUMNS", "LINES"} <= processes.VOLATILE_ENV


def test_a_zygote_that_does_not_answer_is_not_waited_on(tmp_path, monkeypatch):
    import socket

    mute = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)   # listens, never answers
    mute.bind(str(tmp_path / "mute"))
    mute.listen(1)
    monkeypatch.setattr(processes, "_JOIN_TIMEOUT_S", 0.2)
    got = []
    asking = threading.Thread(target=lambda: got.append(processes._Zygote.join(
        {**os.environ, "MEMLEDGER_ZYGOTE": str(tmp_path / "mute")})), daemon=True)
    asking.start()
    asking.join(timeout=120)   # a guard against a hang, not a measure of speed
    assert got == [None]       # no answer: a zygote of one's own
    mute.close()


def test_a_zygote_with_the_cuda_driver_mapped_would_not_serve():
    # Note [Warm starts], 1: CUDA's driver library loaded before a fork leaves the children
    # without CUDA; the runtime library torch links is not the driver
    from memledger.zygote import driver_loaded

    runtime = "7f00-7f10 r-xp 0 08:01 1 /opt/venv/nvidia/cuda_runtime/lib/libcudart.so.13\n"
    driver = "7f20-7f30 r-xp 0 08:01 2 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n"
    assert not driver_loaded(runtime)
    assert driver_loaded(runtime + driver)
