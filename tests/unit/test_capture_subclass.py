"""A capture holds plain tensors, whatever class the script's tensors have (Note [A capture
holds plain tensors], memledger/verify/capture.py): a parameter of a `__torch_function__`
subclass that hands its class on through every op (as pypose's LieTensor does) is copied
as a plain Tensor of its values, so `weights_only=True` reads the file back."""

from __future__ import annotations

import json
import textwrap

import torch

from memledger.verify import worker
from memledger.verify.capture import load_capture

SCRIPT = textwrap.dedent('''
    import torch
    from torch import nn


    class Tagged(torch.Tensor):
        """Hands its class and its tag on through every op, as pypose's LieTensor does."""
        tag = "pose"

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            out = super().__torch_function__(func, types, args, kwargs or {})
            if isinstance(out, torch.Tensor) and not isinstance(out, Tagged):
                out = out.as_subclass(Tagged)
            return out


    class Pose(nn.Module):
        def __init__(self):
            super().__init__()
            self.pose = nn.Parameter(torch.randn(4, 3).as_subclass(Tagged))

        def forward(self, x):
            return x @ self.pose


    torch.manual_seed(0)
    model = Pose()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        loss = model(torch.randn(2, 4)).square().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
''')


def test_a_parameter_of_a_tensor_subclass_is_captured_as_a_plain_tensor(tmp_path):
    # GIVEN a script whose parameter is a `__torch_function__` subclass (its `.to(copy=True)`
    # is one too: the old capture pickled its class and the load refused it)
    script = tmp_path / "tagged.py"
    script.write_text(SCRIPT)
    out, status = tmp_path / "run.capture", tmp_path / "status.json"
    # WHEN the baseline is captured for one step
    code = worker.main(["--out", str(out), "--status", str(status), "--steps", "1",
                        str(script)])
    assert code == 0, json.loads(status.read_text())
    # THEN the file reads back, its weights and gradients plain tensors of the values
    data = load_capture(str(out))
    step = data["steps"][0]
    assert type(step["grads"]["pose"]) is torch.Tensor
    assert type(step["params"]["pose"]) is torch.Tensor
    assert step["params"]["pose"].shape == (4, 3)
