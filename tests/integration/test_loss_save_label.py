"""The loss's save of the model's output is the script's, not the model's forward (Note [A
save just after the model's forward returned], ledger/model.py).

`F.mse_loss(model(x), y)`: autograd packs mse_loss's inputs before the op allocates, so
the save of the output has the event of the forward's last allocation, inside the model's
forward scope by events. `show` listed the 32 B under "(Net.forward)" among the saves (and
named mse_loss's backward op so); the collector now marks a save made outside every
module's forward, and it stays the script's.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import memledger
from memledger.ledger.model import Ledger


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).tanh() + 1.0   # ops of the model's own forward: "(Net.forward)"


def test_the_loss_save_of_the_model_output_is_the_scripts(tmp_path):
    torch.manual_seed(0)
    out = tmp_path / "run.ledger"
    with memledger.trace(out):
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            x, y = torch.randn(4, 3), torch.randn(4, 2)
            F.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    led = Ledger.load(out)
    by_module = led.summary().to_json_dict()["activations"]["by_module"]
    # tanh's output (4x2 fp32, 32 B) saved by tanh inside Net.forward (fc saved only x and
    # its weight: an input and a parameter); the model's output (`+ 1.0`, 32 B) and y (an
    # input) saved by mse_loss, in the script: {"(Net.forward)": 64} before
    assert by_module == {"(Net.forward)": 32, "": 32}
    step2 = led.storages[(led.storages["step"] == 2) & (led.storages["op"]
                                                        == "mse_loss_backward.default")]
    assert led.labelled(step2)["module"].tolist() == [""]
