"""`--fake` on a check a real run passes, a 0-dim tensor formatted, and a library's warnings
(Rules 34 and 35 of Note [Fake runs], memledger/trace/fake.py; Note [A check a run that
trains passes], trace/fake_checks.py; Note [A warning the script's op raised],
trace/warning_sites.py). Plain torch, in this process."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import memledger
from memledger.ledger.fake_info import fake_info
from memledger.trace.fake_checks import ANSWERED
from memledger.trace.script import run_script

# hl-gauss-pytorch's init, in plain torch: a transform checked against its inverse on
# random values with an asserted `allclose` (tests/clients/train_hl_gauss.py --symlog)
CHECKED_TRANSFORM = '''\
import torch
import torch.nn as nn


def symlog(t):
    return torch.sign(t) * torch.log(t.abs() + 1.0)


def symexp(t):
    return torch.sign(t) * (torch.exp(t.abs()) - 1.0)


class Head(nn.Module):
    def __init__(self, dim, bins):
        super().__init__()
        x = nn.Linear(10, 10)(torch.ones(10)).detach() * 10   # values no fake run has
        assert torch.allclose(symexp(symlog(x)), x, atol=1e-4), "not the inverse"
        self.register_buffer("support", torch.linspace(-3.0, 3.0, bins + 1))
        self.proj = nn.Linear(dim, bins)

    def forward(self, h, y):
        target = torch.bucketize(symlog(y), self.support[1:-1])
        return nn.functional.cross_entropy(self.proj(h), target)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.SiLU())
head = Head(16, 32)
opt = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=1e-3)
for step in range(2):
    x, y = torch.randn(4, 8), torch.randn(4) * 5
    loss = head(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
'''


def _peaks(tmp_path: Path, source: str) -> dict:
    script = tmp_path / "checked.py"
    script.write_text(source)
    got = {}
    for fake in (False, True):
        argv, path = list(sys.argv), list(sys.path)   # run_script sets both
        try:
            with memledger.trace(tmp_path / f"{fake}.ledger", fake=fake) as led:
                run_script(script, [])
        finally:
            sys.argv[:], sys.path[:] = argv, path
        got[fake] = led
    return got


def test_an_asserted_allclose_on_random_values_passes_under_fake(tmp_path):
    """Rule 34: the init's `assert torch.allclose(symexp(symlog(x)), x)` on `randn(10) *
    10` read the stand-in False and the fake run stopped with the script's AssertionError
    (exit 3: hl-gauss-pytorch's `--symlog`). The assert's other way raises, so the stand-in
    is True, said at the line with why; the fake ledger is the real one to the byte."""
    leds = _peaks(tmp_path, CHECKED_TRANSFORM)
    real, fake = leds[False], leds[True]
    # parameters 8x16 + 16 + 16x32 + 32 = 688 floats (2,752 B), the support 33 floats
    assert fake.peak().bytes == real.peak().bytes == 15_464
    assert fake.ledger.at_peak() == real.ledger.at_peak()
    (si,) = [s for s in fake_info(fake.ledger).standins if s.op == "aten.allclose.default"]
    assert (si.value, si.why, si.line) == ("True", ANSWERED, 17)
    assert si.code.startswith("assert torch.allclose(symexp(symlog(x)), x, atol=1e-4)")


# each spelling of a check, in a script (pytest rewrites a test's own asserts)
CHECKS = """\
import torch

x = torch.nn.Linear(10, 10)(torch.ones(10)).detach()   # values no fake run has
assert torch.allclose(x, x + 1e-9)
assert torch.equal(x, x.clone())
assert (x == x.clone()).all(), "differ"
if not torch.allclose(x, x.clone()):
    raise ValueError("mismatch")
assert not torch.equal(x, x + 1)
torch._assert((x >= -100).all(), "in range")
if torch.allclose(x, torch.zeros(10)):
    x = x + 1
ok = torch.equal(x, x.clone())
assert bool((x > 0).all()) is False
"""


def test_a_check_is_answered_by_the_way_that_does_not_raise(tmp_path):
    """Each spelling of a check a real run passes gets the value that goes on (lines 4-7:
    `assert` on `allclose`, `equal`, `.all()` read by the jump itself, `if not ...:
    raise`; line 9 `assert not`: False; line 10 torch's own `torch._assert`, whose frame
    reads it); a bool that only chooses a branch (line 11: no raise either way), one stored
    and never checked (13; a stored one checked next: test_fake_followups.py) or compared
    by `is` (14) keeps Rule 3's False."""
    script = tmp_path / "checks.py"
    script.write_text(CHECKS)
    argv, path = list(sys.argv), list(sys.path)   # run_script sets both
    try:
        with memledger.trace(fake=True) as led:
            run_script(script, [])
    finally:
        sys.argv[:], sys.path[:] = argv, path
    got = [(s.line, s.op, s.value, s.why) for s in fake_info(led.ledger).standins]
    assert got == [
        (4, "aten.allclose.default", "True", ANSWERED),
        (5, "aten.equal.default", "True", ANSWERED),
        (6, "aten._local_scalar_dense", "True", ANSWERED),
        (7, "aten.allclose.default", "True", ANSWERED),
        (9, "aten.equal.default", "False", ANSWERED),
        (10, "aten._local_scalar_dense", "True", ANSWERED),
        (11, "aten.allclose.default", "False", ""),
        (13, "aten.equal.default", "False", ""),
        (14, "aten._local_scalar_dense", "False", ""),
    ]


def test_a_formatted_0_dim_tensor_reads_the_item_stand_in():
    """Rule 35: `f"{loss:.4f}"` stopped a fake run (exit 2, "formatting a tensor's value
    reads it") where `f"{loss.item():.4f}"` read the stand-in 0.0; `f"{loss}"` printed
    "FakeTensor(..., size=())" where a real run prints the number. Both now read
    `.item()`'s stand-in at their line, with the events a real run's formatting makes
    (`detach`, then `.item()`): in each run as many events as `.detach().item()` spelled
    out."""
    import torch

    events = {}
    for fake in (False, True):
        for spelled in (False, True):
            with memledger.trace(fake=fake) as led:
                torch.manual_seed(0)
                w = torch.nn.Linear(4, 4, bias=False).weight   # values no fake run has
                loss = (w @ torch.ones(4, 2)).sum()
                if spelled:
                    text = (f"{loss.detach().item():.4f}", f"{loss.detach().item()}",
                            f"{w.sum().detach().item():>8.2f}")
                else:
                    text = (f"{loss:.4f}", f"{loss}", f"{w.sum():>8.2f}")
                loss.backward()
            events[fake, spelled] = led.ledger.n_events
            if not fake:
                assert text == ("-2.6897", "-2.6896681785583496", "   -1.34")
                continue
            assert text == ("0.0000", "0.0", "    0.00")
            if not spelled:   # said once: one line
                assert [(s.op, s.value, s.code) for s in fake_info(led.ledger).standins] == [
                    ("aten._local_scalar_dense", "0.0",
                     'text = (f"{loss:.4f}", f"{loss}", f"{w.sum():>8.2f}")')]
    assert events[False, False] == events[False, True] == 17
    assert events[True, False] == events[True, True]


LIBRARY = '''\
import torch


def index(x):
    return x[[slice(None), 0]]


def softmax(x):
    return torch.nn.functional.softmax(x)
'''


def _library(tmp_path: Path):
    path = tmp_path / "lib56b.py"
    path.write_text(LIBRARY)
    spec = importlib.util.spec_from_file_location("lib56b", path)
    lib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lib)
    return lib


def test_a_librarys_warnings_are_shown_at_its_own_lines_under_fake(tmp_path):
    """Note [A warning the script's op raised]: a warning torch raises in C++ (an index
    by a list of slices) and one its Python code raises with stacklevel 2 (`F.softmax`
    without `dim`) were shown at memledger/trace/fake_literals.py, the `__torch_function__`
    that passes each call on; now at the library's lines 5 and 9, as without memledger. A
    filter on the library's module acts on them as in a run without memledger."""
    import torch

    lib = _library(tmp_path)
    for fake in (False, True):
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            with memledger.trace(fake=fake):
                x = torch.randn(4, 3)
                lib.index(x)
                lib.softmax(x)
        assert sorted((Path(w.filename).name, w.lineno) for w in shown) == [
            ("lib56b.py", 5), ("lib56b.py", 9)], (fake, [str(w.message)[:40] for w in shown])
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", module="lib56b")
            with memledger.trace(fake=fake):
                lib.softmax(torch.randn(4, 3))
        assert shown == [], fake


def test_a_librarys_warnings_are_shown_at_its_own_lines_under_the_doctors_probe(tmp_path):
    """The doctor's probe, a TorchFunctionMode too, showed the C++ warning at the library's
    line already (the first form of Note [A warning the script's op raised]), but the one
    torch's Python raises with stacklevel 2 at the frame above its own, torch/overrides.py
    (`handle_torch_function`); now both at the library's lines."""
    import torch

    from memledger.trace.doctor_probe import DoctorProbe

    lib = _library(tmp_path)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with DoctorProbe():
            x = torch.randn(4, 3)
            lib.index(x)
            lib.softmax(x)
    assert sorted((Path(w.filename).name, w.lineno) for w in shown) == [
        ("lib56b.py", 5), ("lib56b.py", 9)]
