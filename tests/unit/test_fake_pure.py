"""Pure parts of `--fake`: allocator rounding, option checks, the target."""

from __future__ import annotations

import pytest

from memledger.errors import EXIT_USAGE, ScriptError
from memledger.trace.fake_options import check_fake_options


def test_cuda_block_bytes_rounds_to_512():
    from memledger.trace.fake import cuda_block_bytes

    # c10 CUDACachingAllocator round_size: max(512, ceil(n / 512) * 512); no block for 0
    assert [cuda_block_bytes(n) for n in (0, 1, 40, 512, 513, 4096, 4097)] == \
        [0, 512, 512, 512, 1024, 4096, 4608]


@pytest.mark.parametrize("device, measure", [(None, True), ("tpu", None), ("cuda:x", None)])
def test_fake_options_refused_with_exit_2(device, measure):
    with pytest.raises(ScriptError) as e:
        check_fake_options(device, measure)
    assert e.value.exit_code == EXIT_USAGE and str(e.value).startswith("memledger:")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("device", [None, "cpu", "cuda", "cuda:1"])
def test_fake_options_accepted(device):
    check_fake_options(device, None)
    check_fake_options(device, False)


def test_cuda_target_on_this_build():
    import torch

    from memledger.trace.fake import FakeTarget

    t = FakeTarget.for_device("cuda")
    assert (t.device, t.rounding) == ("cuda:0", 512)
    assert t.kernels == ("cpu" if torch.version.cuda is None else "cuda")
    assert FakeTarget.for_device("cpu") == FakeTarget("cpu", "cpu", 0)
    assert FakeTarget.for_device(None).device == ""     # the script's own devices


@pytest.mark.parametrize("verb", [["measure", "examples/train_mlp.py", "--fake"],
                                  ["compare", "examples/train_mlp.py", "--policy", "none",
                                   "--fake"],
                                  ["trace", "examples/train_mlp.py", "--fake", "--measure"],
                                  ["trace", "examples/train_mlp.py", "--device", "cuda"]])
def test_fake_options_it_cannot_honour_exit_2_in_one_line(verb, capsys):
    from memledger.cli import main

    assert main(verb) == 2
    err = capsys.readouterr().err
    assert err.startswith("memledger:") and err.strip().count("\n") == 0


def test_budget_file_can_ask_for_a_fake_cuda_check():
    from memledger.budget.model import Budget

    b = Budget(fake=True, device="cuda", peak="80GiB")
    assert (b.fake, b.device, b.peak.bytes if hasattr(b.peak, "bytes") else b.peak) == \
        (True, "cuda", 80 * 2**30)
    assert Budget(peak="1GiB").fake is False


def test_session_turns_a_fake_workers_exit_2_into_one_line(tmp_path, monkeypatch):
    from memledger.trace import session

    line = "memledger: cannot run fake at t.py:3 `u = x.unique()`: ..."
    monkeypatch.setattr(session, "_worker", lambda *a, **k: {"code": 2, "reason": line,
                                                             "steps": 0})
    script = tmp_path / "t.py"
    script.write_text("")
    with pytest.raises(ScriptError) as e:
        session.trace_script(script, [], tmp_path / "x.ledger", fake=True)
    assert e.value.exit_code == EXIT_USAGE and str(e.value) == line


def test_storage_device_without_a_tensor():
    from memledger.trace.fake import FakeTarget

    # FSDP2 resizes storages it holds no tensor for: they go where the target is
    assert FakeTarget("cuda:0", "cpu", 512).storage_device() == "cuda:0"
    assert FakeTarget("", "cpu", 512).storage_device() == "cpu"
    assert FakeTarget("", "cuda", 512).storage_device() == "cuda:0"


def test_real_answers_patch_a_module_imported_inside_and_put_it_back(tmp_path, monkeypatch):
    """Note [Asked whether a tensor is fake]: a library imported during a fake run gets the
    real run's answer from its import on; after the run its own function is back."""
    import importlib
    import sys

    from memledger.trace import fake_questions

    pkg = tmp_path / "asklib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text("def is_fake(x):\n    return True\n\n"
                                  "def tracing(x):\n    return is_fake(x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(fake_questions.QUESTIONS, "asklib.utils", {"is_fake": lambda x: False})
    for name in ("asklib", "asklib.utils"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with fake_questions.RealAnswers() as answers:
        utils = importlib.import_module("asklib.utils")
        assert utils.tracing(0) is False                 # asked inside: the real answer
        assert answers in sys.meta_path
    assert utils.tracing(0) is True and answers not in sys.meta_path
    with fake_questions.RealAnswers():                  # already imported: patched at entry
        assert utils.tracing(0) is False
    assert utils.tracing(0) is True


def test_split_sizes_that_do_not_sum_are_split_evenly():
    """Rule 18 (trace/fake.py): stand-in sizes (zeros from `.tolist()`) become an even
    split of the dimension; sizes that sum, as a real run's do, are left alone."""
    import torch

    from memledger.trace.fake import even_split
    x = torch.empty(1026, 8, device="meta")
    assert even_split((x, [0, 0, 0, 0]), None) == [257, 257, 256, 256]
    assert even_split((x, [0, 0], 1), None) == [4, 4]
    assert even_split((x,), {"split_sizes": [1, 2], "dim": -1}) == [4, 4]
    assert even_split((x,), {"split_sizes": [3, 5], "dim": -1}) is None
    assert even_split((x, [1000, 26]), None) is None
    assert even_split((x, []), None) is None
