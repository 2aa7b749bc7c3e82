"""`--fake`: the same ledger as the real run, without the data or the memory.

Every bundled example and the Llama example at tiny size run twice in this process
(`memledger.trace()` around the unmodified script, 2 steps): for real, and above
FakeTensorMode. The peak and the bytes of every category at the peak must agree, within
64 B of setup constants (Note [Fake runs] in memledger/trace/fake.py: a fake run copies
the optimizer's scalar literals, a few 4-byte storages, outside the step's peak).
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path

import pytest

import memledger
from memledger.ledger.fake_info import fake_info
from memledger.trace.script import run_script

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {  # tiny sizes, 2 steps: the peak of each is in step 2 (Adam state exists)
    "mlp": ["--steps", "2", "--batch-size", "16"],
    "cnn": ["--steps", "2", "--batch-size", "4"],
    "gpt": ["--steps", "2", "--batch-size", "2", "--n-layer", "2"],
    "llama": ["--steps", "2", "--batch-size", "2", "--seq-len", "32"],
}
SETUP_CONSTANTS_BYTES = 64


def _trace(name: str, fake: bool, out: Path) -> None:
    argv, path = list(sys.argv), list(sys.path)   # run_script sets both
    try:
        with memledger.trace(out, fake=fake):
            run_script(ROOT / "examples" / f"train_{name}.py", EXAMPLES[name])
    finally:
        sys.argv[:], sys.path[:] = argv, path


@pytest.fixture(scope="session")
def real_and_fake(tmp_path_factory):
    """{example: (real Ledger, fake Ledger)}, traced once per run (xdist workers share)."""
    from memledger.ledger.model import Ledger
    from tests.conftest import only_one_worker, shared_dir

    d = shared_dir(tmp_path_factory, "fake-vs-real")
    with only_one_worker(d):
        if not (d / "done").exists():
            for name in EXAMPLES:
                for kind in ("real", "fake"):
                    _trace(name, kind == "fake", d / f"{name}-{kind}.ledger")
            (d / "done").write_text("ok")
    return {name: (Ledger.load(d / f"{name}-real.ledger"), Ledger.load(d / f"{name}-fake.ledger"))
            for name in EXAMPLES}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_fake_peak_and_categories_equal_real(real_and_fake, name):
    real, fake = real_and_fake[name]
    assert fake.header["fake"] is True and fake_info(fake).target_device == "cpu"
    assert abs(fake.peak().bytes - real.peak().bytes) <= SETUP_CONSTANTS_BYTES
    assert fake.at_peak() == real.at_peak()
    assert (fake.peak().step, fake.peak().phase) == (real.peak().step, real.peak().phase)


@pytest.mark.parametrize("client", ["train_gathers.py", "train_tied.py"])
def test_fake_takes_the_out_of_place_backward_paths(tmp_path, client):
    """Note [In place but for the mode]: fake tensors take torch's out-of-place backward
    branches too, and the fold applies to them; without it a slice-by-slice parameter read
    786,432 B (23 %) over the real run. A tied weight's sum stays out of place in both."""
    script = ROOT / "tests" / "clients" / client
    leds = {}
    for fake in (False, True):
        argv, path = list(sys.argv), list(sys.path)
        try:
            with memledger.trace(tmp_path / f"{fake}.ledger", fake=fake) as led:
                run_script(script, ["--steps", "2"])
        finally:
            sys.argv[:], sys.path[:] = argv, path
        leds[fake] = led
    real, fake = leds[False], leds[True]
    assert fake.peak().bytes == real.peak().bytes
    assert fake.at_peak() == real.at_peak()


def test_fake_gpt_peak_exact(real_and_fake):
    # params + grads + AdamW state + activations: identical storages, so identical bytes
    real, fake = real_and_fake["gpt"]
    assert fake.peak().bytes == real.peak().bytes
    assert fake.storages["bytes"].sum() >= real.storages["bytes"].sum()


def test_fake_standin_names_the_script_line(real_and_fake):
    # train_llama.py prints loss.item() every step: a stand-in 0.0 recorded once, at its line
    _, fake = real_and_fake["llama"]
    info = fake_info(fake)
    items = [s for s in info.standins if "loss.item()" in s.code]
    assert len(items) == 1 and items[0].value == "0.0"
    assert items[0].file.endswith("train_llama.py") and items[0].line > 0
    assert info.flops > 0 and info.kernels == "cpu" and info.rounding_bytes == 0


def test_fake_real_ledger_summary_has_no_fake_key(real_and_fake):
    real, fake = real_and_fake["mlp"]
    assert real.summary().fake is None
    assert fake.summary().to_json_dict()["fake"]["target_device"] == "cpu"


@pytest.mark.skipif(__import__("torch").version.cuda is not None,
                    reason="CPU-only build: CPU kernels stand in for CUDA")
def test_fake_cuda_target_rounds_every_size():
    import torch

    with memledger.trace(fake=True, device="cuda") as led:
        model = torch.nn.Linear(256, 10)        # weight 10 x 256 x 4 = 10,240 B (20 blocks)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)    # bias 10 x 4 = 40 B -> 512
        model(torch.randn(4, 256)).sum().backward()
        opt.step()
    st = led.storages
    params = st[st["category"] == "parameter"]
    assert sorted(params["bytes"]) == [512, 10240] and set(params["device"]) == {"cuda:0"}
    assert led.device == "cuda:0" and led.header["fake_kernels"] == "cpu"
    assert (st.loc[st["device"] == "cuda:0", "bytes"] % 512 == 0).all()


@pytest.mark.skipif(__import__("torch").version.cuda is not None,
                    reason="CPU-only build: CPU kernels stand in for CUDA")
def test_fake_cuda_target_keeps_adams_step_counters_on_the_host():
    """Note [Fake runs], Rule 8: AdamW's `step` is a host tensor on CUDA unless capturable
    or fused, so the device's optimizer state is exactly 2 x the parameters."""
    import torch

    def run():
        with memledger.trace(fake=True, device="cuda") as led:
            model = torch.nn.Linear(256, 10)     # 10,240 B + 40 B bias -> 512 B block
            opt = torch.optim.AdamW(model.parameters(), lr=0.1)
            for _ in range(2):
                model(torch.randn(4, 256)).sum().backward()
                opt.step()
                opt.zero_grad()
        st = led.storages
        return st[st["category"] == "optimizer_state"].groupby("device")["bytes"].sum()

    # (capturable=True cannot run here: torch refuses it on the CPU kernels standing in)
    by_dev = run()
    assert by_dev["cuda:0"] == 2 * (10_240 + 512) and by_dev["cpu"] == 2 * 4


@pytest.mark.skipif(__import__("torch").version.cuda is not None,
                    reason="CPU-only build: CPU kernels stand in for CUDA")
def test_fake_cuda_target_steps_adam_by_foreach_as_cuda_does():
    """Note [Foreach as in the real run]: torch.optim defaults to foreach for CUDA
    parameters; a fake parameter's type made it loop per tensor (found on an H200: the fake
    MLP read +501,720 B of temporaries over the real CUDA run)."""
    import torch

    def peak_parts(foreach):
        with memledger.trace(fake=True, device="cuda") as led:
            model = torch.nn.Linear(512, 512)   # weight 1,048,576 B, bias 2,048 B
            opt = torch.optim.Adam(model.parameters(), foreach=foreach)
            for _ in range(2):
                model(torch.randn(4, 512)).sum().backward()
                opt.step()
                opt.zero_grad()
        assert opt.param_groups[0]["foreach"] is foreach   # the default is put back
        return led

    def parts(led):
        return led.peak().bytes, led.at_peak()["temporary"]

    p = 1_048_576 + 2_048
    default = peak_parts(None)
    # foreach: one `_foreach_sqrt` list of every parameter's size, the rest in place
    assert parts(default) == parts(peak_parts(True)) == (5 * p, p)
    # the per-tensor loop: `exp_avg_sq.sqrt()` and its quotient, both weight-sized, at once
    assert parts(peak_parts(False)) == (4 * p + 2 * 1_048_576, 2 * 1_048_576)
    # and `show` says where that peak is, and what lowers it
    from rich.console import Console

    from memledger.report.terminal import print_summary

    console = Console(record=True, width=200)
    print_summary(default.summary(), console)
    text = " ".join(console.export_text().split())
    assert "The peak is inside optimizer.step(): 1.0 MiB of it" in text
    assert "`foreach=False` in the optimizer" in text


def test_fake_value_dependent_sizes_take_their_upper_bound():
    import torch

    with memledger.trace(fake=True) as led:
        x = torch.empty(100).normal_()          # unknown (Rule 36 knows a randn's)
        idx = torch.nonzero(x > 0)              # upper bound: (100, 1) int64 = 800 B
        assert idx.shape == (100, 1)
        n = int((x > 0).sum())                  # stand-in 0
        assert n == 0
    info = fake_info(led.ledger)
    assert {s.op for s in info.standins} == {"aten.nonzero.default",
                                            "aten._local_scalar_dense"}
    assert 800 in set(led.storages["bytes"])


def test_fake_small_integers_are_computed_for_real():
    import torch

    # batch indices drawn for real (same generator as a real run): slices have real lengths
    with memledger.trace(fake=True) as led:
        gen = torch.Generator().manual_seed(0)
        data = torch.randint(100, (1000,), generator=gen)
        ix = torch.randint(900, (4,), generator=gen)
        x = torch.stack([data[i:i + 64] for i in ix])
        assert x.shape == (4, 64)
    assert fake_info(led.ledger).standins == []


def _fake_ledger_pass(tmp_path, source: str, name: str = "train.py",
                      extra: tuple[str, ...] = ()) -> tuple[int, str]:
    """The ledger pass of `trace --fake` (with `extra` options) on a script of `source`, in
    this process and in `tmp_path` (the CLI runs the same worker in a fresh one and prints
    the status's reason as its one line: session.trace_script): (exit code, reason)."""
    from memledger.trace.worker import main as worker_main

    script = tmp_path / name
    script.write_text(source)
    status = tmp_path / "status.json"
    argv, path, cwd = list(sys.argv), list(sys.path), os.getcwd()
    os.chdir(tmp_path)
    try:
        code = worker_main(["ledger", "--fake", *extra, "--out", str(tmp_path / "x.ledger"),
                            "--status", str(status), str(script)])
    finally:
        sys.argv[:], sys.path[:] = argv, path
        os.chdir(cwd)
    return code, json.loads(status.read_text())["reason"]


def test_fake_script_that_needs_data_exits_2_with_its_line(tmp_path, capfd):
    code, reason = _fake_ledger_pass(
        tmp_path, "import torch\nx = torch.randint(5, (2_000_000,))\n"
        "u = torch.unique(x)  # its size is the data\n", "needs_data.py")
    assert code == 2 and "needs_data.py:3 `u = torch.unique(x)" in reason
    assert reason.startswith("memledger: cannot run fake at ") and "\n" not in reason
    assert "Traceback" not in capfd.readouterr().err


def test_a_script_that_raises_after_a_stand_in_is_told_which_value_was_made_up(tmp_path,
                                                                                 capfd):
    """A count read off the model's output gets a stand-in and the script raises its own
    error: exit 3 as the script's, and its one line names the stand-in that may have taken
    the branch. (A bool read by the check itself, DETR's loss `if not (boxes...).all():
    raise`, now passes as a real run does: Rule 34, tests/integration/test_fake_checks.py.)"""
    code, reason = _fake_ledger_pass(
        tmp_path, "import torch\nboxes = torch.empty(4, 4).uniform_()\n"
        "corners = int((boxes[:, 2:] >= 0).sum())\n"
        "if corners != 8:\n    raise ValueError('boxes must be corners')\n",
        "checks.py")
    assert code == 3 and reason.startswith("script raised ValueError: boxes must be corners")
    assert "the last stand-in, 0 at " in reason and \
        "checks.py:3 `corners = int((boxes[:, 2:] >= 0).sum())`" in reason and "\n" not in reason
    capfd.readouterr()


_GRAD_SQ = ("import math\nimport torch\nmodel = torch.nn.Linear(4, 1)\n"
            "(model(torch.randn(2, 4)) ** 2).sum().backward()\n"
            "g_sq = sum((p.grad * p.grad).sum().item() for p in model.parameters())\n")


@pytest.mark.parametrize("line,what", [
    ("lr = 0.1 / math.sqrt(g_sq)", "divides by zero"),
    ("scale = math.log(g_sq)", "raised math domain error"),
])
def test_arithmetic_on_a_stand_in_zero_stops_in_one_line(tmp_path, capfd, line, what):
    """D-Adaptation's DAdaptSGD divides by the square root of `.item()` sums: a fake run's
    stand-in 0.0 made that a ZeroDivisionError, its traceback and exit 3 as the script's
    failure. Now exit 2 and one line naming the line that failed and the stand-in zero
    (Note [Arithmetic on a stand-in], trace/fake_arithmetic.py)."""
    code, reason = _fake_ledger_pass(tmp_path, _GRAD_SQ + line + "\n", "grad_norm.py")
    assert (code, reason) == (2, (
        f"memledger: cannot run fake at grad_norm.py:6 `{line}`: {what} after the stand-in "
        "0.0 a --fake run gives `.item()` (aten._local_scalar_dense) at grad_norm.py:5 "
        "`g_sq = sum((p.grad * p.grad).sum().item() for p in model.parameters())` (a fake "
        "tensor has no values; a real run reads them there); trace it for real "
        "(docs/fake.md, Values)"))
    assert "Traceback" not in capfd.readouterr().err


def test_a_division_by_zero_with_no_stand_in_is_the_scripts_own(tmp_path, capfd):
    """A zero the script made itself (no stand-in handed out before) divides as in a real
    run: the script's failure, exit 3, its traceback shown."""
    code, reason = _fake_ledger_pass(
        tmp_path, "import torch\nx = torch.ones(2)\nsteps = 0\nprint(1 / steps)\n",
        "own_zero.py")
    assert code == 3 and reason == "script raised ZeroDivisionError: division by zero"
    assert "Traceback" in capfd.readouterr().err


@pytest.mark.parametrize("line,what", [
    ("print(model(torch.randn(2, 4)).detach().numpy())", "`.numpy()` reads tensor values"),
    ("torch.save(model.state_dict(), 'ckpt.pt')", "torch.save writes tensor values"),
])
def test_fake_refuses_value_reads_in_one_line(tmp_path, capfd, line, what):
    """A logging line or a checkpoint save reads values a fake run does not have: exit 2
    naming the script's line, not exit 3 with torch's traceback."""
    code, reason = _fake_ledger_pass(
        tmp_path, "import torch\nmodel = torch.nn.Linear(4, 1)\n"
        "loss = model(torch.randn(2, 4)).sum()\n" + line + "\n")
    assert code == 2 and f"train.py:4 `{line}`: {what}" in reason, reason
    assert "Traceback" not in capfd.readouterr().err


def test_fake_names_the_library_option_by_what_failed(tmp_path, capfd):
    """A library's checkpoint saving (poutyne's `ModelCheckpoint` callback, inside
    `model.fit`) under --fake: the line named the library and said to trace "with an option
    of `poutyne` that skips that part (e.g. no evaluation)", an option that has nothing to
    do with a save. The example now follows what failed: "(e.g. no checkpoint saving)".
    The library is a function compiled under the interpreter's site-packages (no file
    needed: the frame's name is what makes it a library's)."""
    lib = os.path.join(sysconfig.get_paths()["purelib"], "memledger_test_lib", "saving.py")
    code, reason = _fake_ledger_pass(
        tmp_path, "import torch\nmodel = torch.nn.Linear(4, 1)\nns = {'torch': torch}\n"
        f"exec(compile('def save(m):\\n    torch.save(m.state_dict(), \"c.pt\")\\n', {lib!r}, "
        "'exec'), ns)\nns['save'](model)\n")
    assert code == 2, reason
    assert "train.py:5 `ns['save'](model)`: `memledger_test_lib` (called by the script) at " \
        "memledger_test_lib/saving.py:2: torch.save writes tensor values" in reason, reason
    assert reason.endswith("that skips that part (e.g. no checkpoint saving), or trace it "
                           "for real"), reason
    assert "Traceback" not in capfd.readouterr().err


def test_fake_names_the_library_the_script_called_and_the_one_that_saved(tmp_path, capfd):
    """Note [The library the script called] (trace/script.py): pytorch-accelerated's
    `SaveBestModelCallback` saves through accelerate's `Accelerator.save`; the line named
    the inner library as "(called by the script)" and its option as the way out. Two
    stand-in libraries compiled under site-packages: the script calls `outer`, which
    saves through `inner`."""
    site = sysconfig.get_paths()["purelib"]
    inner = os.path.join(site, "memledger_test_inner", "save.py")
    outer = os.path.join(site, "memledger_test_outer", "trainer.py")
    code, reason = _fake_ledger_pass(
        tmp_path, "import torch\nmodel = torch.nn.Linear(4, 1)\nns = {'torch': torch}\n"
        f"exec(compile('def save(m):\\n    torch.save(m.state_dict(), \"c.pt\")\\n', {inner!r}, "
        "'exec'), ns)\n"
        f"exec(compile('def train(m):\\n    save(m)\\n', {outer!r}, 'exec'), ns)\n"
        "ns['train'](model)\n")
    assert code == 2, reason
    assert "train.py:6 `ns['train'](model)`: `memledger_test_outer` (called by the script), " \
        "in `memledger_test_inner` at memledger_test_inner/save.py:2: torch.save writes " \
        "tensor values" in reason, reason
    assert "trace with an option of `memledger_test_outer` that skips that part (e.g. no " \
        "checkpoint saving)" in reason, reason
    assert "Traceback" not in capfd.readouterr().err


def test_fake_names_a_fit_on_the_data_beside_evaluation(tmp_path, capfd):
    """A library the script calls hands the data's values to numpy to fit on them
    (pytorch-frame's MutualInformationSort gives sklearn the features, helper hunt52c):
    the way out read "(e.g. no evaluation)", which this fit is not. A stand-in library
    compiled under site-packages whose `fit` calls `.numpy()`."""
    site = sysconfig.get_paths()["purelib"]
    prep = os.path.join(site, "memledger_test_prep", "sort.py")
    code, reason = _fake_ledger_pass(
        tmp_path, "import torch\nx = torch.empty(8, 3).normal_()\nns = {'torch': torch}\n"
        f"exec(compile('def fit(t):\\n    return t.numpy().argsort()\\n', {prep!r}, "
        "'exec'), ns)\n"
        "ns['fit'](x)\n")
    assert code == 2, reason
    assert "`memledger_test_prep` (called by the script) at memledger_test_prep/sort.py:2: " \
        "`.numpy()` reads tensor values" in reason, reason
    assert reason.endswith("trace with an option of `memledger_test_prep` that skips that "
                           "part (e.g. no evaluation, no fit on the data's values), or trace "
                           "it for real"), reason
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("steps_by,steps", [("whole", 1), ("forward", 2)])
def test_fake_counts_steps_as_asked(tmp_path, steps_by, steps):
    """`trace --fake --steps-by whole` (or `forward`) of a script with no optimizer: the
    worker built the fake collector without `steps_by`, so it counted optimizer steps and
    `trace` said "the script ran no optimizer step ... (--steps-by forward) or trace the
    whole script (--steps-by whole)", the option it had been given (exit 2). A real run and
    `memledger.trace(fake=True, steps_by=...)` counted as asked."""
    code, reason = _fake_ledger_pass(
        tmp_path, "import torch\nmodel = torch.nn.Linear(4, 4)\n"
        "for _ in range(2):\n    model(torch.randn(8, 4)).sum()\n",
        extra=("--steps-by", steps_by))
    assert code == 0, reason
    assert json.loads((tmp_path / "status.json").read_text())["steps"] == steps
    assert memledger.load(tmp_path / "x.ledger").summary().steps_traced == steps


@pytest.mark.parametrize("width,how", [
    ("idx.max() + 1", "is read from a tensor's values"),
    ("-1", "is its input's largest value plus one (num_classes=-1)"),
])
def test_fake_one_hot_whose_width_is_in_the_values_exits_2(tmp_path, capfd, width, how):
    """Rule 24 (trace/fake_literals.py): `F.one_hot(idx, idx.max() + 1)` (ST-MoE's router)
    or `F.one_hot(idx)` of indices read off a model's output: the width is the values'.
    Before, Rule 3's stand-in made it 0 (or 1) wide and the run went on, silently: here
    the one-hot was (256, 0) (with -1: (256, 1)) where the real run's is (256, W), W the
    largest index plus one; on tests/clients/train_stmoe.py the fake peak read 593.2 KiB
    against the real 766.9 KiB. Now exit 2 with the line; a width known to the run (an
    int) runs as before."""
    src = ("import torch, torch.nn.functional as F\nmodel = torch.nn.Linear(4, 8)\n"
           "idx = model(torch.randn(256, 4)).argmax(-1)\n"
           "known = F.one_hot(idx, 8).float()\n"
           f"oh = F.one_hot(idx, {width}).float()\n")
    code, reason = _fake_ledger_pass(tmp_path, src)
    assert code == 2 and reason == (
        f"memledger: cannot run fake at train.py:5 `oh = F.one_hot(idx, {width}).float()`: "
        f"one_hot's width (num_classes) {how}, which a --fake run does not have (a "
        "stand-in would make it 0 or 1 wide, and every size computed from it wrong); "
        "trace it for real"), reason
    assert "Traceback" not in capfd.readouterr().err


def test_a_one_element_numpy_read_is_a_stand_in(tmp_path):
    """Rule 21 (trace/fake_literals.py): `loss.detach().numpy().item()`, TabNet's logging of
    each batch's loss inside its `fit`, reads one value, as `.item()` does: a stand-in 0.0
    with its record, where the fake run stopped at once (exit 2); a known integer tensor's
    `.numpy()` gives its real values."""
    code, reason = _fake_ledger_pass(
        tmp_path, "import torch\nmodel = torch.nn.Linear(4, 1)\n"
        "loss = model(torch.randn(2, 4)).sum()\n"
        "assert loss.detach().numpy().item() == 0.0\n"
        "assert torch.arange(3).numpy().tolist() == [0, 1, 2]\n")
    assert code == 0, reason
    info = fake_info(memledger.load(tmp_path / "x.ledger"))
    assert [(s.op, s.value, s.line) for s in info.standins] == [("Tensor.numpy", "0.0", 4)]


def test_a_view_of_a_view_added_to_in_place_does_not_hang_a_fake_run(tmp_path):
    """Deformable DETR's `delta_bbox[..., :2] += reference`: autograd rebuilds the written
    view's node one view at a time (an alias, then a slice), holding the view's lock, and
    Rule 17 read `grad_fn` at the slice, which waited on that lock for ever. In a child
    process, so that a hang fails the test instead of the suite."""
    _ends_in_a_child(tmp_path / "view_of_view.py",
                     "import torch, memledger\nwith memledger.trace(fake=True):\n"
                     "    x = torch.nn.Linear(4, 4)(torch.randn(2, 3, 4))\n"
                     "    x[..., :2] += torch.randn(2, 3, 2)\n"
                     "    x.sigmoid().sum().backward()\nprint('done')\n")


def _ends_in_a_child(script, source: str) -> None:
    """Run `source` in a child process, which must print `done`: a hang fails the test
    (timeout) instead of the suite."""
    import subprocess

    script.write_text(source)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]


def test_a_view_written_with_a_number_does_not_hang_a_fake_run(tmp_path):
    """kornia's `convert_affinematrix_to_homography` (every `warp_affine`): `H[..., -1, -1]
    += 1.0` on a padded tensor that needs grad. The wrapped 1.0 left the written view's node
    to be read at the next op (Note [Wrapped scalars saved for backward]), and the next op
    was autograd replaying that view for `copy_`, under the view's lock: the read waited on
    it for ever (Note [A view's node is not read], trace/scalars.py). In a child process,
    so that a hang fails the test instead of the suite."""
    _ends_in_a_child(tmp_path / "view_plus_number.py",
                     "import torch, torch.nn.functional as F, memledger\n"
                     "with memledger.trace(fake=True):\n"
                     "    a = torch.nn.Linear(4, 6)(torch.randn(3, 4)).view(-1, 2, 3)\n"
                     "    h = F.pad(a, [0, 0, 0, 1], 'constant', value=0.0)\n"
                     "    h[..., -1, -1] += 1.0\n"
                     "    h.sum().backward()\nprint('done')\n")


def test_fake_float_literal_is_known():
    """Rule 3: `torch.tensor(15.0)` and `torch.tensor([-1.0, 1.0])` are literals, whose
    values the call fixes; only integer ones were known, so kornia's argument check
    (`bounds[0] <= factor[0]`, on `factor.repeat(2) * torch.tensor([-1.0, 1.0])`) read a
    stand-in False and raised "degrees out of bounds" in every fake run of RandomAffine."""
    import torch

    with memledger.trace(fake=True) as led:
        f = torch.tensor(15.0).repeat(2) * torch.tensor([-1.0, 1.0])
        assert bool(-360 <= f[0]) and float(f[1]) == 15.0
    assert fake_info(led.ledger).standins == []


def test_fake_draw_from_a_generator_left_behind_is_a_standin():
    """Rule 21 (Note [Draws a fake run makes for real], trace/fake_random.py): a Linear's
    init too large to be made for real (1,049,600 weights, over Rule 5's 2^20 a draw) draws
    nothing in a fake run, so the global generator's next `randperm` is another
    permutation than the real run's: kornia's RandAugment picked other operations, its
    fake ledger 25,224 B over the real one with no stand-in said. Now said; a generator of
    the script's own, every draw made, is not. (A small init, `Linear(4, 4)` as this test
    had, is made for real since the fifty-sixth session: tests/integration/
    test_fake_draws.py.)"""
    import torch

    torch.manual_seed(0)
    with memledger.trace(fake=True) as led:
        torch.nn.Linear(1024, 1025)
        torch.randperm(5).tolist()
        gen = torch.Generator().manual_seed(1)
        torch.randint(0, 50, (4, 8), generator=gen).tolist()
    assert [(s.op, s.value) for s in fake_info(led.ledger).standins] == [
        ("aten.randperm.default", "a draw of its own, not the real run's")]


def test_fake_masked_rows_take_their_real_count(tmp_path):
    """`logits[ids != pad]`: the mask's values are known (token ids from the script's own
    generator), so the selected rows are counted as the real run counts them; this stopped
    the run (exit 2) before."""
    script = tmp_path / "masked.py"
    script.write_text(
        "import torch\ntorch.manual_seed(0)\ngen = torch.Generator().manual_seed(1)\n"
        "emb, head = torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50)\n"
        "opt = torch.optim.SGD([*emb.parameters(), *head.parameters()], lr=0.1)\n"
        "for step in range(3):\n"
        "    ids = torch.randint(0, 50, (4, 32), generator=gen)\n"
        "    ids[:, 20:] = 0\n"
        "    keep = ids != 0\n"
        "    logits = head(emb(ids))\n"
        "    loss = torch.nn.functional.cross_entropy(logits[keep], ids[keep])\n"
        "    loss.backward(); opt.step(); opt.zero_grad()\n")
    real, fake = traced_real_then_fake(tmp_path, script)
    assert fake.peak().bytes == real.peak().bytes
    assert fake.at_peak() == real.at_peak()


def traced_real_then_fake(tmp_path, script, argv=()):
    """(real, fake): the script run in this process under `memledger.trace()`, then under
    `trace(fake=True)`, each ledger written to tmp_path as False.ledger / True.ledger;
    sys.argv and sys.path (run_script sets both) put back after each. test_fake_draws.py
    uses it too."""
    leds = {}
    for fake in (False, True):
        argv0, path = list(sys.argv), list(sys.path)
        try:
            with memledger.trace(tmp_path / f"{fake}.ledger", fake=fake) as led:
                run_script(script, list(argv))
        finally:
            sys.argv[:], sys.path[:] = argv0, path
        leds[fake] = led
    return leds[False], leds[True]


def test_fake_with_measure_is_refused(tmp_path, capsys):
    from memledger.cli import main

    code = main(["trace", str(ROOT / "examples" / "train_mlp.py"), "--fake", "--measure",
                 "-o", str(tmp_path / "x.ledger")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no allocator pass" in err


def test_fake_flops_of_one_linear_step():
    import torch

    with memledger.trace(fake=True) as led:
        model = torch.nn.Linear(256, 10)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(4, 256)).sum().backward()
        opt.step()
    # forward addmm 2·4·256·10 = 20,480; backward: grad weight 2·10·4·256 = 20,480 (the
    # input needs no gradient, so no grad-input mm): 40,960 FLOPs
    assert fake_info(led.ledger).flops == 40_960


def test_fake_predict_time_is_modelled_from_flops(real_and_fake):
    from memledger.replay.fake_time import flops_by_event
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    _, fake = real_and_fake["gpt"]
    rep = predict(fake, [parse_policy("checkpoint:blocks.*")], flops=1e12)
    assert rep.time_model.startswith("modelled: FLOPs at 1 TFLOP/s")
    # a step's modelled time = its FLOPs / 1e12: step 2 = events after step 1's last event
    per_ev = flops_by_event(fake)
    s1_end = int(fake.steps["ev"].iloc[0])
    step2 = per_ev[s1_end + 1:int(fake.steps["ev"].iloc[1]) + 1].sum()
    assert rep.untraced_step_time_s == pytest.approx(step2 / 1e12, abs=1e-9)   # whole ns
    # recompute re-runs at most the blocks' forward FLOPs of one step (machinery constants,
    # from this machine's calibration if any, come on top)
    sc = fake.scopes[(fake.scopes["ph"] == "forward") & (fake.scopes["step"] == 2)
                     & fake.scopes["mod"].str.fullmatch(r"blocks\.\d+")]
    blocks_fwd = sum(per_ev[a:b].sum() for a, b in zip(sc["ev0"], sc["ev1"]))
    recompute = rep.policies[0].recompute_s
    assert 0 < recompute <= blocks_fwd / 1e12 * (1 + 1e-9)
    assert rep.cost_source == "modelled"


@pytest.mark.parametrize("fake", [False, True])
def test_device_reads_are_not_events(fake):
    import torch

    with memledger.trace(fake=fake) as led:
        x = torch.randn(4)                      # event 0
        for _ in range(10):
            assert x.device.type == "cpu"       # prim.device under fake: not an event
        y = x + 1                               # event 1
        assert y.shape == (4,) and y.is_contiguous()
    assert led.ledger.n_events == 2


def test_check_fake_gates_a_script_without_running_it(tmp_path, capsys):
    import json

    from memledger.cli import main

    code = main(["check", str(ROOT / "examples" / "train_mlp.py"), "--fake", "--budget", "8MiB",
                 "--json", "--", "--batch-size", "64"])
    out = json.loads(capsys.readouterr().out)
    # the MLP's real peak (tests/integration/test_check_deterministic.py): params 1,597,480
    # + grads 1,597,480 + Adam state 3,194,984 + temporaries 2,101,764 + batch 66,048
    assert out["peak_bytes"] == 8_557_756 and code == 1 and out["ok"] is False


USER_SCRIPT = '''
import argparse
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--data")
p.add_argument("--steps", type=int, default=2)
args = p.parse_args()
torch.manual_seed(0)
np.random.seed(0)
tokens = np.load(args.data, mmap_mode="r")                  # data from a real file
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Embedding(100, 32), nn.Flatten(), nn.Linear(32 * 16, 100)).to(device)
opt = torch.optim.AdamW(model.parameters())
for step in range(args.steps):
    ix = np.random.randint(0, len(tokens) - 17, size=8)     # a random batch
    x = torch.from_numpy(np.stack([tokens[i:i + 16] for i in ix]).astype(np.int64)).to(device)
    y = torch.from_numpy(tokens[ix + 16].astype(np.int64)).to(device)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(step, f"{loss.item():.3f}", model[2].bias[:2].tolist())   # logging
'''


def test_fake_runs_a_script_as_users_write_it(tmp_path):
    import numpy as np

    np.save(tmp_path / "tokens.npy", np.arange(1000, dtype=np.uint16) % 100)
    (tmp_path / "train.py").write_text(USER_SCRIPT)
    argv = ["--data", str(tmp_path / "tokens.npy")]
    leds = []
    for fake in (False, True):
        saved = list(sys.argv), list(sys.path)
        try:
            with memledger.trace(fake=fake) as led:
                run_script(tmp_path / "train.py", argv)
        finally:
            sys.argv[:], sys.path[:] = saved
        leds.append(led.ledger)
    real, fake = leds
    assert fake.at_peak() == real.at_peak() and fake.peak().bytes == real.peak().bytes
    # the batch came from the file for real, x 8 x 16 x 8 B = 1,024 and y 8 x 8 B = 64, in
    # numpy's memory (`torch.from_numpy`), which the allocator never sees: in both ledgers,
    # off the curve (Note [Memory torch's allocator did not hand out])
    for led in (real, fake):
        st = led.storages
        ext = st["external"] & (st["device"] == "cpu")   # a fake run's real sources aside
        assert sorted(st.loc[ext, "bytes"]) == [64, 64, 1_024, 1_024]
    assert fake.at_peak()["input"] == 0
    info = fake_info(fake)
    assert info.real_storages > 0
    assert {s.code.split("(")[0] for s in info.standins} == {'print'}   # .item(), .tolist()


def test_fake_finiteness_checks_answer_as_a_healthy_run():
    import torch

    with memledger.trace(fake=True) as led:
        loss = torch.empty(()).normal_() * 2   # unknown values (Rule 36 knows a randn's)
        g = torch.empty(10).normal_()
        assert bool(torch.isfinite(loss)) is True
        assert bool(loss.isnan()) is False
        assert bool(torch.logical_or(g.isnan(), g.isinf()).any()) is False
        assert bool((~torch.isfinite(g)).any()) is False
        assert bool(g.sum() > 0) is False                # no rule: the plain stand-in
    standins = sorted(fake_info(led.ledger).standins, key=lambda s: s.line)
    assert [s.value for s in standins] == ["True", "False", "False", "False", "False"]


def test_fake_distribution_arguments_pass_their_validation():
    """torch.distributions checks a distribution's parameters as it is built (validation
    is on unless Python runs with -O): `Categorical(logits=x)` asks `Real().check`, `x ==
    x`, a NaN check, then `torch._is_all_true(valid)`, which a finite run passes. That
    last op was not one a finiteness answer went through: the stand-in False raised
    "Expected parameter logits ... to satisfy the constraint IndependentConstraint(Real(),
    1)" (SophiaG's Hessian refresh, which samples labels so; exit 3 in `trace --fake`)."""
    import torch

    with memledger.trace(fake=True):
        logits = torch.randn(4, 8, requires_grad=True)
        labels = torch.distributions.Categorical(logits=logits).sample()
        assert labels.shape == (4,)
        assert bool(torch._is_any_true(torch.isnan(logits))) is False


def test_fake_value_sized_op_on_known_integers_has_its_real_size():
    import torch

    with memledger.trace(fake=True) as led:
        tokens = torch.tensor([5, 0, 3, 0, 0, 7])           # a literal: known values
        idx = (tokens != 0).nonzero()                        # 3 non-padding tokens
        assert idx.shape == (3, 1)
    assert fake_info(led.ledger).standins == []              # computed, not stood in


def test_fake_value_sized_ops_on_known_inputs_have_their_real_size():
    """Qwen-VL's vision tower turns each image's patch grid (`image_grid_thw`, a literal)
    into sequence lengths with `repeat_interleave` by a tensor: its output size is the
    grid's values, known here, so the op runs for real and the fake takes its size. Every
    op torch tags as value-sized takes this path, not only `nonzero`, and an op of several
    outputs (`unique_consecutive`) gets each one's; the run stopped at the first
    `repeat_interleave` (exit 2) before, and at Qwen2.5-VL's `unique_consecutive`."""
    import torch

    with memledger.trace(fake=True) as led:
        grid = torch.tensor([[1, 4, 4], [1, 2, 6]])
        patches = torch.repeat_interleave(grid[:, 1] * grid[:, 2], grid[:, 0])
        owner = torch.repeat_interleave(torch.arange(2), patches)   # 16 + 12 patches
        assert owner.shape == (28,) and patches.shape == (2,)
        x = torch.nn.Linear(4, 4)(torch.randn(28, 4))
        x.index_add(0, owner, x).sum().backward()
        # Qwen2.5-VL's window boundaries: an op of several outputs, each its real size
        bounds = torch.unique_consecutive(torch.tensor([0, 16, 16, 28], dtype=torch.int32))
        assert bounds.shape == (3,)
    assert fake_info(led.ledger).standins == []


def test_fake_tensor_made_from_a_list_of_known_fake_values():
    """Qwen2-VL ends its rotary positions `torch.tensor([p.max() + 1 - len(ids), ...])`:
    torch reads each element's memory itself, which a fake tensor lacks, and the run
    crashed (exit 3, "its data is not allocated yet"). Known elements are read from their
    shadows now (Rule 19)."""
    import torch

    with memledger.trace(fake=True) as led:
        lengths = torch.tensor([3, 5])
        deltas = [n.max() + 1 - 2 for n in lengths]   # 0-d fake tensors, values known
        spans = torch.tensor(deltas).unsqueeze(1)
        nested = torch.as_tensor([[lengths[0], 7], (lengths[1], 1)])
        assert spans.shape == (2, 1) and nested.shape == (2, 2)
        rows = torch.arange(int(spans.sum()))   # 2 + 4: the known values, not stand-ins
        assert rows.shape == (6,)
    assert fake_info(led.ledger).standins == []


def test_fake_rows_kept_by_an_unknown_mask_take_their_upper_bound():
    """Idefics keeps the images that are not all-zero padding: `pixels[real]`, the mask
    made from float pixels the fake run does not have. Every row is kept (the bound, as
    `masked_select`'s), named as a stand-in; this stopped the run (exit 2) before."""
    import torch

    with memledger.trace(fake=True) as led:
        pixels = torch.empty(4, 3, 8, 8).normal_().requires_grad_()   # unknown values
        real = (pixels == 0.0).sum(dim=(-1, -2, -3)) != 3 * 8 * 8
        kept = pixels[real]
        assert kept.shape == (4, 3, 8, 8)
        kept.square().sum().backward()
    info = fake_info(led.ledger)
    assert [(s.op, s.value) for s in info.standins] == [
        ("aten.index.Tensor", "upper bound: every element")]
    assert 4 * 3 * 8 * 8 * 4 in set(led.storages["bytes"])


def test_fake_masked_select_by_a_known_mask_keeps_the_masks_count():
    """Equiformer drops each node's edge to itself: `rel_pos.masked_select(~eye[..., None])
    .reshape(b, n, n - 1, 3)`, the positions float (no values in a fake run), the mask a
    literal's. The output's size is the mask's count, broadcast, whatever the positions
    hold; the upper bound kept all n * n * 3 and the reshape raised ("shape '[1, 6, 5, 3]'
    is invalid for input of size 108", exit 3). An unknown mask keeps its bound."""
    import torch

    with memledger.trace(fake=True) as led:
        pos = torch.empty(1, 6, 1, 3).normal_().requires_grad_()   # unknown values
        rel = pos - pos.transpose(1, 2)                       # (1, 6, 6, 3), unknown values
        keep = ~torch.eye(6, dtype=torch.bool)[None]          # known: 30 of 36 pairs
        picked = rel.masked_select(keep[..., None]).reshape(1, 6, 5, 3)
        picked.square().sum().backward()
        assert torch.masked_select(rel, rel > 0).shape == (108,)   # unknown: the bound
    info = fake_info(led.ledger)
    assert [(s.op, s.value) for s in info.standins] == [
        ("aten.masked_select.default", "upper bound: every element")]
    assert 1 * 6 * 5 * 3 * 4 in set(led.storages["bytes"])


def test_fake_allclose_is_answered_as_equal_is():
    """`torch.allclose`, a bool read off values like `torch.equal`: equiformer's rotation
    of each edge to the y axis returns the identity `if torch.allclose(x, y)`, which random
    points never are. Known operands give the real answer; unknown ones the stand-in False
    (named at the line); before, exit 2 ("aten.allclose.default reads tensor values")."""
    import torch

    with memledger.trace(fake=True) as led:
        assert torch.allclose(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-9]))
        x = torch.empty(4, 3).normal_()   # unknown values (Rule 36 knows a randn's)
        assert not torch.allclose(x, x.new_tensor([0.0, 1.0, 0.0]), atol=1e-6)
    assert [(s.op, s.value) for s in fake_info(led.ledger).standins] == [
        ("aten.allclose.default", "False")]


def _real_and_fake(tmp_path, script: Path, argv: list[str]):
    """(real, fake) as loaded back from the ledger files."""
    from memledger.ledger.model import Ledger

    traced_real_then_fake(tmp_path, script, argv)
    return tuple(Ledger.load(tmp_path / f"{fake}.ledger") for fake in (False, True))


def test_fake_transformers_with_its_own_checkpoint_is_exact(tmp_path):
    """transformers asks whether a tensor is a FakeTensor (Note [Asked whether a tensor is
    fake]); answered as in a real run, its masks take the real run's path: a Llama with
    `gradient_checkpointing_enable()` read 2,110,880 B fake (an explicit causal mask,
    +10,240 B) against 2,100,640 B real. Before that, the script's own checkpoint crashed
    every fake run (FakeCollector._new_storage lacked `mod=`)."""
    pytest.importorskip("transformers")
    real, fake = _real_and_fake(tmp_path, ROOT / "tests" / "clients" / "train_hf.py",
                                ["--model", "llama", "--grad-ckpt", "--no-cache", "--steps", "2"])
    assert fake.peak().bytes == real.peak().bytes == 2_100_640
    assert fake.at_peak() == real.at_peak()
    assert fake_info(fake).fake_aware == []
    # Rule 9: saved fake tensors' releases are followed as real ones' (none were before)
    assert len(fake.extra["released"]) == len(real.extra["released"]) > 0
    import transformers.utils.import_utils as iu   # put back after the run
    assert iu.is_fake_tensor.__name__ == "is_fake_tensor"


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_fake_state_space_scan_is_exact(tmp_path):
    """transformers' Mamba on its CPU path: a Python loop over the sequence, hundreds of
    small saved tensors a layer. Fake and real agreed to the byte when first tried
    (2026-12-03, `trace --fake` against `trace`: 2,650,724 B, the allocator's too)."""
    pytest.importorskip("transformers")
    real, fake = _real_and_fake(tmp_path, ROOT / "tests" / "clients" / "train_zoo.py",
                                ["--model", "mamba", "--steps", "2"])
    assert fake.peak().bytes == real.peak().bytes == 2_650_724
    assert fake.at_peak() == real.at_peak()
    assert (fake.peak().step, fake.peak().phase) == (real.peak().step, real.peak().phase)


def test_fake_graph_of_a_saved_output_is_freed_with_it(tmp_path):
    """Rule 9: a fake tensor saved for backward is kept as an alias, not itself. peft's DoRA
    makes `nn.Parameter(norm(W + B @ A))` at setup: the graph behind the norm (which saves its
    own output) went with the tensor in a real run and stayed to the end of a fake one (a
    64 x 64 fp32 sum, 16,384 B per adapted Linear)."""
    import torch

    frees = {}
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            w, a = torch.randn(64, 64), torch.nn.Parameter(torch.randn(4, 64))
            s = w + a.T @ a                      # 64 x 64 x 4 B = 16,384 B, saved by norm
            m = torch.nn.Parameter(torch.linalg.norm(s, dim=1))   # drops the norm's graph
            del s
            (m * 2).sum().backward()
        st = led.storages
        row = st[(st["bytes"] == 16_384) & (st["op"] == "add.Tensor")].iloc[0]
        frees[fake] = (row["freed"] - row["created"], row["category"])   # events it lived
    # freed when `s` and the graph go, not at the end (the fake run's nn.Parameter is one
    # more event: `detach`, where the real one calls _make_subclass outside dispatch)
    assert frees[False] == (2, "activation") and frees[True] == (3, "activation")


def test_fake_layer_norm_keeps_fp32_statistics_where_the_kernel_does():
    """Rule 10: under CPU autocast bf16 a LayerNorm (fp32 weight) gets a bf16 input; the CPU
    kernel keeps mean and rstd in fp32 (B·T x 4 B each: 2 x 32 x 4 = 256 B), torch's fake
    kernel made them bf16 (128 B)."""
    import torch

    kept = {}
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            lin, ln = torch.nn.Linear(64, 64), torch.nn.LayerNorm(64)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = ln(lin(torch.randn(2, 32, 64)))   # bf16 into fp32 weights
            y.float().sum().backward()
        st = led.storages
        rows = st[st["op"] == "native_layer_norm.default"]
        kept[fake] = sorted(zip(rows["dtype"], rows["bytes"]))
    assert kept[True] == kept[False] == [("bfloat16", 8192), ("float32", 256), ("float32", 256)]


def test_fake_stochastic_depth_rates_are_the_real_ones():
    """Rule 3: vision models set each block's drop-path rate with `[x.item() for x in
    torch.linspace(0, rate, depth)]`. Read as stand-in zeros, every block's drop path was
    the identity in a fake run: its mask and the number `div` saves were missing (Swin v2
    120 B under the real peak)."""
    import torch

    with memledger.trace(fake=True) as led:
        rates = [x.item() for x in torch.linspace(0, 0.3, 4)]
        shift = [int(v) for v in torch.arange(3) * 2]
    assert rates == pytest.approx([0.0, 0.1, 0.2, 0.3]) and shift == [0, 2, 4]
    assert fake_info(led.ledger).standins == []


def test_fake_layer_norm_backward_makes_its_gradient_contiguous():
    """Rule 16: the kernels make layer norm's grad_input contiguous; the meta kernel took
    the incoming gradient's strides. Behind a view-reshape and permute (PVT-v2's stage norm),
    the fake gradient came out transposed where the real one is contiguous, and the copies
    the Linears below make of it differ: a (8, 16, 40) fp32 buffer (20,480 B) made in one
    run and not the other."""
    import torch

    clones = {}
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            torch.manual_seed(0)
            proj, ln = torch.nn.Linear(16, 16), torch.nn.LayerNorm(40)
            # the norm reads a transposed input, as a stage norm after a patch embedding's
            # `flatten(2).transpose(1, 2)`, and hands a view-reshaped gradient back
            h = ln(proj(torch.randn(8, 40, 16)).transpose(1, 2))
            grad = torch.randn(8, 40, 4, 4)   # a gradient with strides (not sum's expand)
            (h.reshape(8, 4, 4, 40).permute(0, 3, 1, 2).contiguous() * grad).sum().backward()
        st = led.storages
        clones[fake] = int((st["op"] == "clone.default").sum())
    assert clones[True] == clones[False]


def test_fake_layer_norm_over_an_input_that_needs_no_gradient():
    """Rule 16 on a backward asked for no grad_input (a norm over the input features,
    w2v-BERT's feature projection): the kernel returns None there, which the stand-in read
    as a tensor (AttributeError in backward, the script failed)."""
    import torch

    with memledger.trace(fake=True) as led:
        ln, lin = torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
        lin(ln(torch.randn(8, 16))).sum().backward()
    st = led.storages
    assert (st["op"] == "native_layer_norm_backward.default").sum() == 2   # weight, bias


def test_fake_a_saved_bool_mask_keeps_its_values_into_backward():
    """Rule 3: `h[mask] = v` with a mask drawn in numpy (wav2vec2's SpecAugment) saves the
    mask, and its backward indexes the gradient with it, a size only the mask's values
    give. The saved alias had lost them, and every wav2vec2-family fake run stopped at
    `loss.backward()` with exit 2."""
    import numpy as np
    import torch

    made = {}
    for fake in (False, True):
        rng = np.random.default_rng(0)
        torch.manual_seed(0)
        with memledger.trace(fake=fake) as led:
            lin, emb = torch.nn.Linear(8, 8), torch.nn.Parameter(torch.randn(8))
            h = lin(torch.randn(4, 6, 8))
            mask = torch.tensor(rng.random((4, 6)) < 0.3, dtype=torch.bool)
            h[mask] = emb.to(h.dtype)
            h.sum().backward()
            if not fake:
                kept = int(mask.sum())
        st = led.storages
        made[fake] = st.loc[st["phase"] == "backward", ["op", "bytes"]].values.tolist()
    assert ["index.Tensor", kept * 8 * 4] in made[False]   # the masked rows' gradient
    assert made[True] == made[False]


def test_fake_factory_from_an_unknown_tensor_is_known():
    """Note [A factory that reads only its tensor's kind]: loralib's `MergedLinear` builds
    its mask of the rows it adapts with `self.weight.new_zeros((out,), dtype=torch.bool)`
    (the weight random: no values in a fake run) and scatters the low-rank update through
    it, `result[mask] = x`. The mask read unknown, the index took its upper bound (every
    row) and backward raised ("IndexPutBackward0 returned an invalid gradient at index 1 -
    got [48, 16] but expected shape compatible with [32, 16]", exit 3). `zeros_like` of an
    unknown activation is known too."""
    import torch

    made = {}
    for fake in (False, True):
        torch.manual_seed(0)
        with memledger.trace(fake=fake) as led:
            w = torch.nn.Parameter(torch.randn(48, 16))
            mask = w.new_zeros((48,), dtype=torch.bool).view(3, -1)
            mask[[True, False, True], :] = True
            a = torch.nn.Parameter(torch.randn(32, 16))
            h = w * 2
            res = torch.zeros_like(h).bool()            # known: all False
            res[mask.view(-1)] = True
            out = h.new_zeros((48, 16))
            out[res[:, 0]] = a
            (out * h).sum().backward()
            assert a.grad.shape == (32, 16)
        st = led.storages
        made[fake] = st.loc[st["phase"] == "backward", ["op", "bytes"]].values.tolist()
        if fake:
            assert fake_info(led.ledger).standins == []
    assert made[True] == made[False]


def test_fake_grouped_mm_takes_the_cpu_kernels_sizes():
    """Rule 11: transformers' MoE experts (Mixtral) call `torch._grouped_mm` in fp32 on CPU;
    the meta kernel refused anything but bf16 (the fake run crashed) and made a contiguous
    output where the CPU kernel pads each row to 16 B: (10, 5) fp32 is 308 B, not 200."""
    import torch

    got = {}
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            offs = torch.tensor([3, 7, 10], dtype=torch.int32)
            x = torch.randn(10, 8, requires_grad=True)
            w = torch.nn.Parameter(torch.randn(3, 12, 8))
            (torch._grouped_mm(x, w.transpose(-2, -1), offs=offs) ** 2).sum().backward()
            torch._grouped_mm(x.detach(), torch.randn(3, 5, 8).transpose(-2, -1), offs=offs)
        st = led.storages
        rows = st[st["op"] == "_grouped_mm.default"]
        got[fake] = (sorted(zip(rows["shape"], rows["bytes"])), led.peak().bytes)
    assert got[True] == got[False] == (
        [("10x12", 480), ("10x5", 308), ("10x8", 320), ("3x12x8", 1152)], 3744)


def test_fake_item_is_an_event_so_the_last_frees_fall_before_the_end():
    """Rule 2: `.item()` is an event in a real run. A fake one returned its value without
    one, so `opt.zero_grad(); print(loss.item())` at a script's end freed the gradients
    after the last event: 16,640 B of `gradient` resident at the end, 0 in the real run."""
    import torch

    ends = {}
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            lin = torch.nn.Linear(64, 64)
            opt = torch.optim.SGD(lin.parameters(), lr=0.1)
            loss = lin(torch.randn(4, 64)).sum()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
        ends[fake] = led.ledger.resident_at_end()
    assert ends[True] == ends[False] and ends[True]["gradient"] == 0


def test_fake_float_mask_of_known_values_is_known_until_written_unknown():
    """Rule 3: BART's decoder makes `attention_mask = torch.ones(B, T)` (float) and asks
    `mask.bool().sum() == numel`; only integer results were computed for real, so the fake
    run stood in False and built an explicit causal mask (+8,192 B of `where` saved per
    run, 3,764,228 B against 3,756,036). A shadow written from unknown values is forgotten,
    not kept stale (it answered 64 here, where the real run has its own count)."""
    import torch

    with memledger.trace(fake=True) as led:
        m = torch.ones(4, 16)
        assert bool(m.to(torch.bool).sum() == m.numel())    # known: no stand-in
        m[:, 8:] = torch.empty(4, 8).normal_()   # unknown values
        assert int(m.to(torch.bool).sum()) == 0             # unknown now: the stand-in
    assert [s.code for s in fake_info(led.ledger).standins] == [
        "assert int(m.to(torch.bool).sum()) == 0             # unknown now: the stand-in"]


def test_fake_eager_qat_copies_and_grows_its_observers_as_a_real_run():
    """Rule 12: `prepare_qat` deep-copies the model; each copied fake tensor got a copy of
    the run's FakeTensorMode and the copy's `.to(device)` crashed (`_apply(): Couldn't swap
    Linear.weight`). Rule 11: the observers' per-channel state grows at the first forward
    on CPU but not in the meta kernel: buffers 164 B fake against 1,236 B real."""
    import torch

    q = torch.ao.quantization
    got = {}
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            torch.manual_seed(0)
            m = torch.nn.Sequential(q.QuantStub(), torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 4), q.DeQuantStub())
            m.train()
            m.qconfig = q.get_default_qat_qconfig("x86")
            m = q.prepare_qat(m)
            m(torch.randn(8, 16)).sum().backward()
        got[fake] = (led.ledger.resident_at_end()["buffer"], led.peak().bytes)
    assert got[True] == got[False] and got[True][0] == 1_236


def test_fake_deep_copy_of_a_module_with_known_values():
    """Rule 3's shadows live in a fake tensor's `__dict__`; `copy.deepcopy(model)` (an EMA
    copy) copied them inside FakeTensorMode and crashed ("set the storage of a tensor on
    device meta to a storage on different device cpu"): a `position_ids = arange(...)`
    buffer was enough. The copy now keeps the values."""
    import copy

    import torch

    with memledger.trace(fake=True) as led:
        m = torch.nn.Linear(4, 4)
        m.register_buffer("ids", torch.arange(16))
        twin = copy.deepcopy(m).to("cpu")                  # Rule 12: the run's mode
        assert int(twin.ids.sum()) == 120
    assert fake_info(led.ledger).standins == []


def test_fake_deep_copy_of_a_parameter_holding_a_gradient_copies_its_data_alone():
    """Rule 33 (Note [A fake parameter's deep copy], trace/fake_literals.py): a real
    `copy.deepcopy(param)` clones the data only; under FakeTensorMode the parameter is a
    FakeTensor flagged `_is_param`, and `Tensor.__deepcopy__` cloned its gradient too. Two
    Linear(32, 32) weights with gradients, deep-copied while the copies live: one 4,096 B
    clone each (32 x 32 x 4), 8,192 B; the fake ledger read 16,384 B (x-mlps-pytorch's
    Noisable under gradient accumulation)."""
    import copy

    import torch

    got = {}
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            torch.manual_seed(0)
            m = torch.nn.Sequential(torch.nn.Linear(32, 32, bias=False),
                                    torch.nn.Linear(32, 32, bias=False))
            m(torch.randn(2, 32)).sum().backward()
            copies = [copy.deepcopy(p) for p in m.parameters()]
            plain = all(c.grad is None and isinstance(c, torch.nn.Parameter) for c in copies)
            del copies
        st = led.storages
        rows = st[st["op"] == "clone.default"]
        got[fake] = (sorted(zip(rows["shape"], rows["bytes"])), led.peak().bytes, plain)
    assert got[True] == got[False]
    assert got[True][0] == [("32x32", 4096), ("32x32", 4096)] and got[True][2]


def test_fake_ctc_loss_with_known_target_lengths_has_its_real_size():
    """Rule 3: `_ctc_loss` sizes its saved log_alpha by max(target_lengths); torch's fake
    kernel refuses (exit 2 on wav2vec2's CTC head). Target lengths counted from the script's
    own labels are known: log_alpha (2, 50, 2 x 10 + 1) fp32 = 8,400 B, as in the real run."""
    import torch
    import torch.nn.functional as F

    got = {}
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            g = torch.Generator().manual_seed(0)
            lin = torch.nn.Linear(16, 20)
            labels = torch.randint(1, 20, (2, 10), generator=g)
            labels[1, 7:] = 0
            log_probs = lin(torch.randn(50, 2, 16, generator=g)).log_softmax(-1)
            F.ctc_loss(log_probs, labels, torch.full((2,), 50), (labels > 0).sum(-1)).backward()
        st = led.storages
        rows = st[st["op"] == "_ctc_loss.Tensor"]
        got[fake] = (sorted(zip(rows["shape"], rows["bytes"])), led.peak().bytes)
    assert got[True] == got[False] and got[True][0] == [("2", 8), ("2x50x21", 8400)]


def test_fake_optimizer_step_counter_counts_once():
    """Rule 3: a float computed from known values is computed for real; on FakeTensorMode's
    own constant (AdamW's `step`) that must not write the constant as well: `step += 1`
    counted twice (6.0 after 3 steps) before the constant was copied first."""
    import torch

    with memledger.trace(fake=True):
        lin = torch.nn.Linear(4, 4)
        opt = torch.optim.AdamW(lin.parameters())
        for _ in range(3):
            lin(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
        assert opt.state[lin.weight]["step"].item() == 3.0


def test_fake_sparse_gradient_keeps_its_entries():
    """Rule 13 and Note [Fake sparse tensors] (trace/fake_sparse.py): FakeTensorMode's
    `clone` of a sparse COO tensor keeps no entries, so a sparse embedding gradient's copy
    read 0 B and a stand-in record said so. The copy now has the real run's entries: no
    stand-in record for it."""
    import torch

    with memledger.trace(fake=True) as led:
        e = torch.nn.Embedding(50, 8, sparse=True)
        e(torch.randint(0, 50, (4, 6))).sum().backward()
    assert not [s for s in fake_info(led.ledger).standins if s.value.startswith("nnz 0")]


def test_fake_sparse_gradient_kept_as_made_has_its_bytes():
    """Rule 13 and Note [A sparse gradient kept as made]: AccumulateGrad's copy of a sparse
    embedding gradient is read as the gradient it copies, in fake runs too: the gradient
    is its 4 x 6 x 8 fp32 values (768 B) in both runs (0 B fake before), its indices the
    batch's ids (192 B of input, counted once). SparseAdam's step on it, which read 0 B
    (Note [Fake sparse tensors]), now makes the real run's bytes: the same peak."""
    import torch

    grads, peaks = [], []
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            e = torch.nn.Embedding(50, 8, sparse=True)
            opt = torch.optim.SparseAdam(e.parameters())
            ids = torch.arange(24).reshape(4, 6) % 20   # known to the fake run: 20 kept
            e(ids).square().sum().backward()    # contiguous values: kept as made untraced
            opt.step()
        st = led.ledger.storages
        grads.append(st.loc[st["category"] == "gradient", "bytes"].tolist())
        peaks.append(led.ledger.peak().bytes)
        assert st.loc[st["category"] == "input", "bytes"].tolist() == [4 * 6 * 8]
    assert grads == [[4 * 6 * 8 * 4]] * 2
    assert peaks[0] == peaks[1]
    assert not [s for s in fake_info(led.ledger).standins if s.value.startswith("nnz 0")]


def test_fake_reduced_losses_keep_their_host_buffer():
    """Rule 14 (trace/fake_losses.py): on CPU a reduced `mse_loss`, `smooth_l1_loss`,
    `binary_cross_entropy` and `soft_margin_loss` return a 0-dim view of the element-wise
    loss, which the loss then holds: (2, 4, 8, 8) fp32, 2,048 B each; `l1_loss` does not.
    A fake run counted 4 B each (a diffusers UNet's MSE, held through the next forward:
    6,140 B under the real ledger)."""
    import torch
    import torch.nn.functional as F

    def losses():
        g = torch.Generator().manual_seed(0)
        a = torch.rand(2, 4, 8, 8, generator=g)
        b = torch.rand(2, 4, 8, 8, generator=g)
        return [F.mse_loss(a, b), F.mse_loss(a, b, reduction="sum"), F.smooth_l1_loss(a, b),
                F.binary_cross_entropy(a, b), F.soft_margin_loss(a, b), F.l1_loss(a, b)]

    sizes = []
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            kept = losses()
            del kept
        st = led.ledger.on_device()
        sizes.append(st[st["op"].str.contains("loss|binary_cross_entropy")]["bytes"].tolist())
    assert sizes[0] == sizes[1] == [2048] * 5   # l1_loss is `abs(a - b).mean()`: no row


def test_fake_parameter_made_from_a_literal_moves_to_another_dtype():
    """Rule 23 (trace/fake_swap.py): gpytorch's `ScaleKernel` makes `raw_outputscale` from
    `torch.tensor(0.0)`, which FakeTensorMode keeps as a constant under a weak reference,
    and botorch moves the kernel to float64 (`self.to(train_X)`): `_apply` swaps fake
    parameters and refused ("_apply(): Couldn't swap K.raw"), so every fake run of such a
    model stopped. Now it moves: 8 B of float64, as the real run holds."""
    import torch

    class K(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.raw = torch.nn.Parameter(torch.tensor(0.0))

    with memledger.trace(fake=True, device="cpu") as led:
        k = K().to(torch.float64)
        assert k.raw.dtype == torch.float64 and k.raw.requires_grad
    st = led.storages
    assert st.loc[st["dtype"] == "float64", "bytes"].tolist() == [8]


def test_fake_module_moved_where_it_is_inside_a_checkpoint_trains():
    """Rule 27 (Note [A swap that changes nothing], trace/fake_swap.py): soft-moe-pytorch
    moves its experts with `expert.to(device)` in every forward; torch's `_apply` swaps a
    fake parameter even when `.to` returns it unchanged, and under a non-reentrant
    checkpoint the re-run in backward did so after the graph had taken the parameter's
    gradient accumulator: "Trying to execute AccumulateGrad node that was poisoned by
    swap_tensors", where the real run trains. Now the fake run trains too, the parameter
    stays the object the optimizer holds, and its ledger's peak is the real one's: 12,744 B.
    A move to another dtype still swaps (the test above)."""
    import torch
    from torch.utils.checkpoint import checkpoint

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):
            self.lin.to("cpu")
            return self.lin(x).relu()

    peaks = []
    for fake in (False, True):
        with memledger.trace(**({"fake": True, "device": "cpu"} if fake else {})) as led:
            torch.manual_seed(0)
            m = M()
            weight = m.lin.weight
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            for _ in range(2):
                x = torch.randn(8, 16, requires_grad=True)
                opt.zero_grad()
                checkpoint(m, x, use_reentrant=False).sum().backward()
                opt.step()
            assert m.lin.weight is weight and weight.grad.shape == (16, 16)
        peaks.append(led.summary().peak.bytes)
    assert peaks == [12_744, 12_744]


def test_fake_tensors_have_a_data_pointer_per_storage():
    """Rule 26 (Note [A data pointer per fake storage], trace/fake_pointers.py): every fake
    tensor's `data_ptr()` was 0, so heavyball, which keys its optimizer state by
    `(data_ptr(), numel, dtype, device)`, gave a [64, 32] weight's state to a [32, 64] one
    and every fake run of it stopped at the first step. Now one address per storage, a
    view's offset in bytes added; the script's own meta tensors and real ones as before."""
    import torch

    real = torch.ones(3)
    with memledger.trace(fake=True):
        a, b = torch.empty(64, 32), torch.empty(32, 64)
        keys = {(t.data_ptr(), t.numel(), t.dtype) for t in (a, b)}
        assert len(keys) == 2 and 0 not in {a.data_ptr(), b.data_ptr()}
        assert a[1:].data_ptr() == a.data_ptr() + 32 * 4
        assert a.view(-1).data_ptr() == a.data_ptr()
        assert torch.empty(4, device="meta").data_ptr() == 0
        assert real.data_ptr() == real.untyped_storage().data_ptr() != 0
    assert "data_ptr" not in torch.Tensor.__dict__   # put back


def test_fake_windows_keep_their_storage_and_an_istft_runs():
    """Rule 29: FakeTensorMode's dispatch cache made a cache hit's output at its view's size:
    `torch.hann_window(64)` makes 65 elements and returns the first 64, 260 B on its first
    call and in the real run, 256 B on the next (BS-RoFormer's fake ledger 12 B under the
    real one). And Rule 3's `torch.equal`: `torch.istft` checks its window's overlap-add
    with `is_scalar_tensor_true` (an `equal` on values), which stopped every fake run
    ("aten.equal.default reads tensor values"); it now reads a stand-in False, as a run
    that trains does, said at its line."""
    import torch

    with memledger.trace(fake=True) as led:
        spec = torch.stft(torch.randn(2, 256), 64, 16, window=torch.hann_window(64),
                          return_complex=True)
        torch.istft(spec, 64, 16, window=torch.hann_window(64))
    st = led.storages
    assert st.loc[st["op"] == "hann_window.default", "bytes"].tolist() == [260, 260]
    assert [(s.op, s.value) for s in fake_info(led.ledger).standins] == [
        ("aten.equal.default", "False")]


def test_fake_deep_copy_of_a_view_keeps_the_whole_storage():
    """Rule 32 (Note [A deep copy keeps the whole storage], memledger/trace/fake_literals.py):
    a real deep copy of `linspace(..., 33)[:-1]` copies its storage, 33 float64 = 264 B,
    for the 32 it shows; torch clones a fake tensor instead, 256 B, and the fake ledger
    read 8 B under the real one (torch-harmonics' grids, which its `lru_cache(copy=True)`
    deep-copies: `--model lsno` 16 B under in `buffer`). Now the copy, its shadow and the
    peak are the real run's."""
    import copy

    import torch

    got = {}
    for fake in (False, True):
        with memledger.trace(fake=fake) as led:
            lons = torch.linspace(0, 6.0, 33, dtype=torch.float64)[:-1]   # 33 made, 32 shown
            m = torch.nn.Linear(4, 4)
            m.register_buffer("lons", copy.deepcopy(lons), persistent=False)
            ids = copy.deepcopy(torch.arange(17)[1:])   # known values (Rule 3) survive
            assert int(ids.sum()) == 136 and m.lons.shape == (32,)
            del lons
            (m(torch.randn(32, 4)).sum(1) * m.lons.float()).sum().backward()
        st = led.storages
        got[fake] = (led.peak().bytes, led.ledger.resident_at_end()["buffer"],
                     sorted(st.loc[st["category"] == "buffer", "bytes"]))
    assert got[True] == got[False] == (1_632, 264, [264])
