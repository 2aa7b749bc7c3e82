"""Spiking neural networks with snntorch, as its tutorials train them: leaky
integrate-and-fire neurons (`snn.Leaky`, `snn.Synaptic`) firing through a surrogate
gradient (`snntorch.surrogate`), the membrane state carried over `--num-steps` time steps
inside the forward and backpropagated through time, inputs rate-coded into Poisson spike
trains (`spikegen.rate`), and snntorch's own losses (`snntorch.functional`). Seeded, tiny,
random "images" in place of MNIST: nothing downloaded.

    python tests/clients/train_snntorch.py --steps 3 --mode seq
    memledger trace tests/clients/train_snntorch.py --steps 2 -o snn.ledger -- --mode seq
    memledger doctor tests/clients/train_snntorch.py --steps 3 -- --mode seq

Modes (`--mode`):

- `seq`: tutorial 7's convolutional SNN: an `nn.Sequential` of Conv2d, MaxPool2d and
  `snn.Leaky(init_hidden=True)` (the hidden state kept inside each neuron), Flatten,
  Linear and an output `snn.Leaky(init_hidden=True, output=True)`; `forward_pass` calls
  `utils.reset(net)` and then the network once per time step, stacking the output spikes;
  `SF.ce_rate_loss()` on them, Adam.
- `class`: tutorials 5 and 6's fully connected SNN: an `nn.Module` holding `fc1`, `lif1`,
  `fc2`, `lif2`, whose forward initialises each neuron's state (`init_leaky()` /
  `init_synaptic()`) and passes it explicitly through the time loop; `--neuron synaptic`
  for `snn.Synaptic` (a synaptic current and a membrane); `SF.mse_count_loss()` on the
  output spikes, Adam.

`--bug noreset` drops the `utils.reset(net)` of `seq`: the state each neuron holds keeps
the last batch's graph into the next batch, the classic snntorch mistake (backward then
fails: "Trying to backward through the graph a second time"); with `--retain`, the script
"fixes" that with `backward(retain_graph=True)`, and the graph grows with every batch.
"""

import argparse

import torch
import torch.nn as nn

import snntorch as snn
import snntorch.functional as SF
from snntorch import spikegen, surrogate, utils


def conv_net(beta: float, channels: int, width: int, classes: int, slope: float):
    """Tutorial 7's network, scaled to `width` x `width` inputs."""
    spike_grad = surrogate.fast_sigmoid(slope=slope)
    side = ((width - 4) // 2 - 4) // 2
    return nn.Sequential(
        nn.Conv2d(1, channels, 5), nn.MaxPool2d(2),
        snn.Leaky(beta=beta, spike_grad=spike_grad, init_hidden=True),
        nn.Conv2d(channels, 2 * channels, 5), nn.MaxPool2d(2),
        snn.Leaky(beta=beta, spike_grad=spike_grad, init_hidden=True),
        nn.Flatten(),
        nn.Linear(2 * channels * side * side, classes),
        snn.Leaky(beta=beta, spike_grad=spike_grad, init_hidden=True, output=True),
    )


class Net(nn.Module):
    """Tutorials 5 and 6: two fully connected layers of spiking neurons."""

    def __init__(self, inputs: int, hidden: int, classes: int, beta: float, neuron: str,
                 num_steps: int) -> None:
        super().__init__()
        self.num_steps = num_steps
        self.neuron = neuron
        grad = surrogate.atan()
        self.fc1 = nn.Linear(inputs, hidden)
        self.fc2 = nn.Linear(hidden, classes)
        if neuron == "leaky":
            self.lif1 = snn.Leaky(beta=beta, spike_grad=grad)
            self.lif2 = snn.Leaky(beta=beta, spike_grad=grad)
        else:
            self.lif1 = snn.Synaptic(alpha=0.9, beta=beta, spike_grad=grad)
            self.lif2 = snn.Synaptic(alpha=0.9, beta=beta, spike_grad=grad)

    def forward(self, x: torch.Tensor):
        """x: (num_steps, batch, inputs) spikes -> (num_steps, batch, classes) spikes and
        membranes."""
        spk2_rec, mem2_rec = [], []
        if self.neuron == "leaky":
            mem1, mem2 = self.lif1.init_leaky(), self.lif2.init_leaky()
            for step in range(self.num_steps):
                cur1 = self.fc1(x[step])
                spk1, mem1 = self.lif1(cur1, mem1)
                cur2 = self.fc2(spk1)
                spk2, mem2 = self.lif2(cur2, mem2)
                spk2_rec.append(spk2)
                mem2_rec.append(mem2)
        else:
            syn1, mem1 = self.lif1.init_synaptic()
            syn2, mem2 = self.lif2.init_synaptic()
            for step in range(self.num_steps):
                cur1 = self.fc1(x[step])
                spk1, syn1, mem1 = self.lif1(cur1, syn1, mem1)
                cur2 = self.fc2(spk1)
                spk2, syn2, mem2 = self.lif2(cur2, syn2, mem2)
                spk2_rec.append(spk2)
                mem2_rec.append(mem2)
        return torch.stack(spk2_rec, dim=0), torch.stack(mem2_rec, dim=0)


def forward_pass(net, num_steps: int, data: torch.Tensor, reset: bool):
    """Tutorial 7's `forward_pass`: reset the hidden states, then one call per time step."""
    spk_rec, mem_rec = [], []
    if reset:
        utils.reset(net)   # resets hidden states for all LIF neurons in net
    for step in range(num_steps):
        spk_out, mem_out = net(data[step])
        spk_rec.append(spk_out)
        mem_rec.append(mem_out)
    return torch.stack(spk_rec), torch.stack(mem_rec)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="seq", choices=["seq", "class"])
    p.add_argument("--neuron", default="leaky", choices=["leaky", "synaptic"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--num-steps", type=int, default=5, help="time steps per sample")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--width", type=int, default=16, help="image side (seq)")
    p.add_argument("--channels", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--beta", type=float, default=0.5)
    p.add_argument("--bug", default=None, choices=["noreset"])
    p.add_argument("--retain", action="store_true", help="with --bug noreset")
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    if args.mode == "seq":
        net = conv_net(args.beta, args.channels, args.width, args.classes, slope=25)
        loss_fn = SF.ce_rate_loss()
    else:
        net = Net(args.width * args.width, args.hidden, args.classes, args.beta, args.neuron,
                  args.num_steps)
        loss_fn = SF.mse_count_loss(correct_rate=0.8, incorrect_rate=0.2)
    optimizer = torch.optim.Adam(net.parameters(), lr=2e-3, betas=(0.9, 0.999))

    loss_hist = []
    for step in range(args.steps):
        # an MNIST-like batch: pixel intensities in [0, 1], rate-coded into spike trains
        images = torch.rand(args.batch, 1, args.width, args.width, generator=gen)
        targets = torch.randint(0, args.classes, (args.batch,), generator=gen)
        net.train()
        if args.mode == "seq":
            spikes = spikegen.rate(images, num_steps=args.num_steps)
            spk_rec, _ = forward_pass(net, args.num_steps, spikes, reset=args.bug != "noreset")
        else:
            spikes = spikegen.rate(images.flatten(1), num_steps=args.num_steps)
            spk_rec, _ = net(spikes)
        loss_val = loss_fn(spk_rec, targets)
        optimizer.zero_grad()
        loss_val.backward(retain_graph=args.retain)
        optimizer.step()
        loss_hist.append(loss_val.item())
        acc = SF.accuracy_rate(spk_rec, targets)
        print(f"step {step}  loss {loss_val.item():.4f}  accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
