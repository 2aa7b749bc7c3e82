"""`--fake` and the values a seeded script's draws give (helper fix57c, fifty-seventh
session): Rule 36 of Note [Fake runs] and Rules 7 and 8 of Note [Draws a fake run makes for
real] (memledger/trace/fake.py, fake_random.py), Note [A literal written in place] and Note
[A check on a stored bool] (fake_checks.py). Plain torch, real against fake in-process."""

from __future__ import annotations

import memledger
from memledger.ledger.fake_info import fake_info
from memledger.trace.fake_checks import ANSWERED
from test_fake import traced_real_then_fake  # tests/integration is on sys.path

# dropout written by hand: a mask `torch.rand(...) < p` on the default generator, in step
# with the real run's (the Linear's init is made for real by Rule 5), feeding a
# masked_select, a nonzero and a dense->sparse conversion, whose sizes are its count
HAND_DROPOUT = """\
import torch
torch.manual_seed(0)
lin = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
for step in range(2):
    x = torch.randn(32, 64)
    keep = torch.rand(32, 64) < 0.25          # dropout written by hand
    h = lin(x)
    kept = h.masked_select(keep)              # the kept activations
    idx = keep.nonzero()
    sp = (x * keep).to_sparse()
    loss = kept.sum() + (sp @ torch.ones(64, 8)).sum() + idx.numel()
    loss.backward()
    opt.step(); opt.zero_grad()
"""

# hl-gauss-pytorch's HLGaussLossFromRunningStats cut down: literal buffers updated in place
# from each seeded batch's targets, a support read back by `.item()` and checked increasing
RUNNING_SUPPORT = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class RunningSupport(nn.Module):
    # a histogram loss whose support follows the targets' running mean and variance

    def __init__(self, bins):
        super().__init__()
        self.bins = bins
        self.register_buffer("step", torch.tensor(1))
        self.register_buffer("mean", torch.tensor(100.0))
        self.register_buffer("p", torch.tensor(1.0))

    def forward(self, logits, y):
        t = self.step.item()
        new = y.mean()
        delta = new - self.mean
        mean = self.mean + delta / t
        self.p.copy_(self.p + (new - mean) * delta)
        self.mean.copy_(mean)
        self.step.add_(1)
        std = (self.p / t).clamp(min=1e-5).sqrt().item()
        m = self.mean.item()
        support = torch.linspace(m - 3 * std, m + 3 * std, self.bins + 1)
        assert ((support[1:] - support[:-1]) > 0).all(), "support must be increasing"
        target = torch.bucketize(y, support[1:-1])
        return F.cross_entropy(logits, target)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.SiLU(), nn.Linear(32, 16))
head = RunningSupport(16)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(2):
    x = torch.randn(64, 8)
    y = x[:, :3].sum(dim=1)
    head(model(x), y).backward()
    opt.step()
    opt.zero_grad()
"""

# checks on values no fake run has (a Linear's output), stored first: in a closure's cell
# (line 7), in a cell a function closed over before the store (line 19), at the top level
# with a call between (line 25)
STORED_ELSEWHERE = """\
import torch
x = torch.nn.Linear(10, 10)(torch.ones(10)).detach()
caught = []


def outer(a):
    same = torch.allclose(a, a.clone())
    def inner():
        return same
    n = a.numel()
    if not same:
        raise ValueError(f"differ over {n}")
    return inner()


def made_first(a):
    def inner():
        return ok
    ok = torch.allclose(a, a.clone())
    print("between")
    assert ok
    return inner()


flag = torch.allclose(x, x.clone())
print("between")
assert flag
print(outer(x), made_first(x))
"""


def _both(tmp_path, source: str):
    script = tmp_path / "script.py"
    script.write_text(source)
    return traced_real_then_fake(tmp_path, script)


def test_a_hand_written_dropout_mask_is_the_real_runs(tmp_path):
    """Rule 36: a float draw from a generator in step with the real run's keeps its values,
    so the mask is known and each size read off it is the real one. Before, the draw's
    values were dropped: masked_select, nonzero and to_sparse took their upper bounds
    (every element, each said), fake peak 166,148 B against the real 80,032 (temporary
    131,076 against 28,320, gradient 0 against 16,640: the peak moved)."""
    real, fake = _both(tmp_path, HAND_DROPOUT)
    assert real.peak().bytes == fake.peak().bytes == 80_032
    assert fake.at_peak() == real.at_peak()
    assert fake.at_peak()["temporary"] == 28_320
    assert fake_info(fake.ledger).standins == []


def test_a_support_from_running_stats_of_seeded_targets_is_the_real_runs(tmp_path):
    """Rule 36 and Note [A literal written in place]: the targets are known (a seeded
    `randn`), and the buffers made from literals keep known values through `copy_`.
    Before, the support read `.item()`'s stand-in 0.0 (FakeTensorMode dropped each
    literal's constant at its `copy_`) and the run stopped at "support must be increasing"
    (exit 3 from `trace --fake`); now fake = real, 42,920 B, every category, no stand-in."""
    real, fake = _both(tmp_path, RUNNING_SUPPORT)
    assert real.peak().bytes == fake.peak().bytes == 42_920
    assert fake.at_peak() == real.at_peak()
    assert fake_info(fake.ledger).standins == []


def _draws_after(sample) -> list:
    import torch

    torch.manual_seed(0)
    with memledger.trace(fake=True) as led:
        p = torch.sigmoid(torch.nn.Linear(4, 4)(torch.ones(2, 4)))   # values unknown
        sample(torch, p)
        torch.randperm(6).tolist()
    return [(s.op, s.value) for s in fake_info(led.ledger).standins]


def test_binomial_and_dirichlet_leave_the_generator_behind():
    """Rule 8: `binomial` (inversion or BTRS) and `_sample_dirichlet` (gammas) draw as many
    numbers as their inputs' values need; made on scratch ones they moved the default
    generator by another count, and the `randperm` after them was another permutation than
    the real run's ([2, 5, 1, 0, 4, 3] against [0, 2, 5, 4, 1, 3] after the binomial),
    nothing said. Now the generator is behind after them, and the draw is said."""
    said = [("aten.randperm.default", "a draw of its own, not the real run's")]
    assert _draws_after(lambda torch, p: torch.binomial(torch.full((2, 4), 30.0), p)) == said
    assert _draws_after(lambda torch, p: torch._sample_dirichlet(p.exp())) == said


def test_a_check_stored_in_a_cell_or_past_a_call_passes(tmp_path, capsys):
    """Note [A check on a stored bool]: a bool stored in a closure's cell, or in a module's
    variable with a call before its check, kept the stand-in False and the script stopped
    ("differ over 10" at line 12). Now each is followed to its check: True, said with why."""
    import sys

    from memledger.trace.script import run_script

    script = tmp_path / "stored.py"
    script.write_text(STORED_ELSEWHERE)
    argv, path = list(sys.argv), list(sys.path)
    try:
        with memledger.trace(fake=True) as led:
            run_script(script, [])
    finally:
        sys.argv[:], sys.path[:] = argv, path
    got = [(s.line, s.value, s.why) for s in fake_info(led.ledger).standins]
    assert got == [(25, "True", ANSWERED), (7, "True", ANSWERED), (19, "True", ANSWERED)]
    assert capsys.readouterr().out.splitlines()[-1] == "True True"
