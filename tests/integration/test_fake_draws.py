"""`--fake` and the default generator: Rules 5 and 6 of Note [Draws a fake run makes for
real] (memledger/trace/fake_random.py), plain torch, real against fake ledger in-process."""

from __future__ import annotations

import memledger
from memledger.ledger.fake_info import fake_info
from test_fake import traced_real_then_fake  # tests/integration is on sys.path

# The default generator drawn for floats the fake run keeps no values of (an Embedding's
# `normal_`, a Linear's `uniform_`, a dropout mask), between them a CPU attention kernel
# (tagged as drawing, `dropout_p=0`: draws nothing), then ids by `torch.randint` on the
# default generator, whose duplicates size the step: `unique` keeps the rows looked up.
DRAWS = """\
import torch
import torch.nn.functional as F
torch.manual_seed(0)
emb = torch.nn.Embedding(64, 256)
head = torch.nn.Linear(256, 4)
opt = torch.optim.SGD([*emb.parameters(), *head.parameters()], lr=0.1)
for step in range(3):
    ids = torch.randint(0, 64, (64,))
    rows = torch.unique(ids)
    h = F.dropout(emb(rows), 0.5)
    h = F.scaled_dot_product_attention(h[None, None], h[None, None], h[None, None])[0, 0]
    head(h).sum().backward()
    opt.step(); opt.zero_grad()
"""


def _both(tmp_path, source: str):
    script = tmp_path / "draws.py"
    script.write_text(source)
    return traced_real_then_fake(tmp_path, script)


def test_fake_run_draws_the_default_generator_as_the_real_run(tmp_path):
    """Rule 5: the inits' and the dropout's float draws are made for real (values dropped),
    so each step's `randint` ids are the real run's and `unique` keeps the real run's rows.
    Before, the first init left the default generator behind: the fake ledger's peak was
    383,020 B against the real 375,840 B (activation 132,268 against 129,192: other
    duplicates), a stand-in said at the `randint` line."""
    real, fake = _both(tmp_path, DRAWS)
    assert real.peak().bytes == fake.peak().bytes == 375_840
    assert fake.at_peak() == real.at_peak()
    assert fake.at_peak()["activation"] == 129_192
    assert fake_info(fake.ledger).standins == []


def test_an_attention_kernel_with_no_dropout_draws_nothing():
    """Rule 6: the CPU attention kernel is tagged as drawing, but with `dropout_p=0` it
    draws nothing; before, each call left the default generator behind (here too large
    to be made for real: 1,126,400 elements a side), and the next `randperm` was said as
    a draw of the fake run's own."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    with memledger.trace(fake=True) as led:
        q = torch.ones(1, 1, 1100, 1024)
        F.scaled_dot_product_attention(q, q, q)
        torch.randperm(5).tolist()
    assert fake_info(led.ledger).standins == []


def test_a_draw_whose_count_depends_on_values_leaves_the_generator_behind(tmp_path):
    """Rule 6: `torch.poisson` of rates the fake run does not know draws as many numbers
    as its rejection sampling needs, which scratch inputs cannot tell: the default
    generator is behind after it, and the next `randint` is said as a stand-in."""
    import torch

    torch.manual_seed(0)
    with memledger.trace(fake=True) as led:
        rates = torch.nn.Linear(4, 4)(torch.randn(2, 4)).exp()
        torch.poisson(rates)
        torch.randperm(5).tolist()
    assert [(s.op, s.value) for s in fake_info(led.ledger).standins] == [
        ("aten.randperm.default", "a draw of its own, not the real run's")]
