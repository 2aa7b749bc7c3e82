"""A spiking neuron's membrane, reset in place between samples, as sinabs' LIF keeps it
(tests/clients/train_sinabs.py), in plain torch: `Linear`, `Neuron`, `Linear`, SGD. The
neuron keeps its membrane `v` as a buffer, decays it by a trained factor each time step
(`a * v` saves `v`, the factor trained), and rebinds the buffer to the last time step's at
the end of its call. Before each sample the loop resets the membrane in place
(`v.zero_()`, `v.detach_()`, as sinabs' `reset_states`), so the next call's first time
step saves the buffer itself, which the call then lets go of (Note [A saved buffer its
module lets go of], trace/collector.py).

    python tests/clients/train_kept_state.py --steps 2
    memledger predict kept.ledger -p 'offload:1'

`--reset new` rebinds the buffer to new zeros instead; `--time T` time steps (3).
`--layers 2`: `Linear`, `Neuron`, `Linear`, `Neuron`, `Linear`, the neurons' spikes a
sigmoid and their reset `v - s * thr`, `thr` a Parameter (no gradient) of each neuron made
from one tensor, as sinabs' neurons all take `torch.tensor(1.0)`, their default argument:
both neurons save that one storage (Note [Blocks that share a save], replay/plan.py).
"""

import argparse

import torch
import torch.nn as nn


class Neuron(nn.Module):
    def __init__(self, thr: torch.Tensor | None = None) -> None:
        super().__init__()
        self.tau = nn.Parameter(torch.tensor(10.0))
        self.register_buffer("v", torch.zeros(0))
        # `nn.Parameter(thr)` shares `thr`'s storage
        self.thr = None if thr is None else nn.Parameter(thr, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # (batch, time, n)
        if self.v.shape != x[:, 0].shape:
            self.v = torch.zeros_like(x[:, 0])
        a = torch.exp(-1.0 / self.tau)
        v, out = self.v, []
        for t in range(x.shape[1]):
            v = a * v + x[:, t]              # saves v: the factor is trained
            if self.thr is None:
                s = (v > 1).float()          # the spikes (no surrogate needed here)
                out.append(s + v.sigmoid())
                v = v - s                    # reset by subtraction
            else:
                s = torch.sigmoid(v - 1)     # soft spikes
                out.append(s)
                v = v - s * self.thr         # saves thr: s needs a gradient
        self.v = v                           # the membrane the next call starts from
        return torch.stack(out, 1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--time", type=int, default=3)
    p.add_argument("--reset", default="zero", choices=["zero", "new"])
    p.add_argument("--layers", type=int, default=1, choices=[1, 2])
    args = p.parse_args()
    torch.manual_seed(0)
    if args.layers == 1:
        model = nn.Sequential(nn.Linear(8, 16), Neuron(), nn.Linear(16, 4))
    else:
        thr = torch.tensor(1.0)
        model = nn.Sequential(nn.Linear(8, 16), Neuron(thr), nn.Linear(16, 16), Neuron(thr),
                              nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        for neuron in model[1::2]:
            if neuron.v.numel():             # a new sample: the membrane back to zero
                if args.reset == "zero":
                    neuron.v.zero_()
                    neuron.v.detach_()
                else:
                    neuron.v = torch.zeros_like(neuron.v)
        loss = model(torch.randn(4, args.time, 8)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
