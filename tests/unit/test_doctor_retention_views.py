"""Note [A view whose grad_fn cannot be read] (memledger/trace/doctor_retention.py)."""

from __future__ import annotations

import torch

from memledger.trace.doctor_retention import RetentionWatch, _grad_tensors


def test_a_no_grad_view_of_a_parameter_updated_in_place_is_no_history_and_no_crash():
    """heavyball's SOAP keeps a `no_grad` view of each parameter (`optimizer.mapping`)
    across its in-place update; reading the view's `grad_fn` raises, and the doctor's step boundary crashed
    (exit 70, "A view was created in no_grad mode ...") on a correct loop."""
    p = torch.nn.Parameter(torch.ones(4))
    with torch.no_grad():
        view = p.view(2, 2)
        p.add_(1)
    kept = p * 2                      # a tensor with history, still found
    watch = RetentionWatch()
    watch.start()
    found = _grad_tensors()
    assert any(t is kept for t in found) and not any(t is view for t in found)
    assert watch.boundary(1) == []
    assert watch.boundary(2) == []    # `kept` is no step's graph grown: nothing retained


PROXY = '''
import torch
import torch.nn as nn


class Cell(nn.Module):
    """A kernel kept in another layout behind a proxy, as xlstm's sLSTM cell keeps its
    recurrent kernel (`ParameterProxy.__setitem__`): a view made under no_grad, written,
    read again."""

    def __init__(self):
        super().__init__()
        self.k = nn.Parameter(torch.zeros(2, 3, 4))
        with torch.no_grad():
            ext = self.k.permute(0, 2, 1)
            ext[0] = 1.0
            self.k.data = ext.permute(0, 2, 1).reshape(2, 3, 4).contiguous()
            self.register_buffer("gate", nn.Softmax(-1)(ext).sum(0))

    def forward(self, x):
        return (x @ self.k).sum() + 0 * self.gate.sum()


torch.manual_seed(0)
m = Cell()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(2):
    loss = m(torch.randn(2, 5, 3))
    loss.backward()
    opt.step()
    opt.zero_grad()
'''


def test_ops_under_no_grad_on_a_written_no_grad_view_leave_the_doctor_watching(tmp_path):
    """The `reshape` under no_grad (a cut, read by its `grad_fn`) and the nn.Softmax (an
    activation module, its input's `grad_fn` read) on the written view: `memledger doctor`
    said "the doctor could not watch the script: script raised RuntimeError: A view was
    created in no_grad mode ..." (exit 3) of a script that runs; the loop is correct."""
    from memledger.doctor.run import diagnose_in_process

    script = tmp_path / "proxy.py"
    script.write_text(PROXY)
    report, outcome = diagnose_in_process(script, [], 2)
    assert (outcome.code, report.findings) == (0, [])
