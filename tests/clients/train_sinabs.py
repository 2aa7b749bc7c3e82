"""sinabs (SynSense's spiking-network library) as its tutorials train it: stateful
spiking layers (`LIF`, `IAF`, `ExpLeak`) whose membrane (`v_mem`, `i_syn`) is a buffer
the layer rebinds at the end of each call and that persists from call to call, surrogate
gradients through the spike function, backpropagation through time inside each layer's
own loop over the time steps, the states reset between samples with
`sinabs.reset_states(model)` and detached with `sinabs.zero_grad(model)`. Seeded, tiny,
nothing downloaded.

    python tests/clients/train_sinabs.py --steps 3 --mode dense
    memledger trace tests/clients/train_sinabs.py --steps 2 -o snn.ledger -- --mode conv
    memledger compare tests/clients/train_sinabs.py -p 'offload:net.*' -- --mode conv

Modes (`--mode`):

- `dense` (the BPTT tutorial): (batch, time, channels) input through an `nn.Sequential`
  of `Linear`, `LIF`, `Linear`, `LIF`, `Linear`, `ExpLeak` (a leaky readout); the loss is
  cross-entropy on the readout's last time step. `--neuron iaf` uses `IAF` for the
  hidden layers, `--tau-syn T` adds synaptic current (`i_syn`), `--train-alphas` trains
  the decay factors, `--min-vmem V` clips the membrane, `--record` records the states.
- `conv` (time folded into the batch, as for Speck): (batch x time, ch, h, w) input
  through `Conv2d`, `IAFSqueeze`, `AvgPool2d`, `Conv2d`, `IAFSqueeze`, `Flatten`,
  `Linear`, `IAFSqueeze`; the output spikes unfolded and summed over time (a rate code)
  into cross-entropy.
- `rec`: a `LIFRecurrent` hidden layer (`rec_connect` a `Linear`) between two `Linear`s.

`--bug noreset`: the loop does not reset the states between samples (no
`sinabs.reset_states`): the last sample's graph stays behind each membrane and the next
backward runs into it. `--bug detached`: the loop detaches the states
(`sinabs.zero_grad(model)`) but never resets them: it runs, each sample starting from the
membranes the last one left.

`sinabs.reset_states(model)` (and `sinabs.zero_grad`) recurse into any module with
children and so pass over a `LIFRecurrent` (its `rec_connect` is a child), leaving its
membrane unreset; `--mode rec` resets each `StatefulLayer` itself, as a user does once
they meet that (`--bug libreset`: it calls the library's two functions, as `dense` does,
and step 2's backward runs into step 1's graph through the recurrent layer's membrane).
`--accum N`, `--validate` (a loss under no_grad each step, states reset before and after),
`--synops` (the library's `register_synops_hooks`: forward hooks on each `Conv2d` /
`Linear` and on the model that count synaptic operations into `hook_data`, and the total
added to the loss as a penalty, as its tutorial on synops does), `--neuron alif` (`ALIF`:
an adaptive threshold, its spike function keeping that threshold on ctx).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import sinabs
import sinabs.layers as sl
from sinabs.activation import MembraneReset, SingleSpike


def build(args) -> nn.Module:
    h = args.hidden
    if args.mode == "dense":
        def neuron():
            kw = dict(tau_syn=args.tau_syn, min_v_mem=args.min_vmem,
                      record_states=args.record)
            if args.neuron == "iaf":
                return sl.IAF(**kw)
            if args.neuron == "alif":   # an adaptive threshold: a second state, `b`
                return sl.ALIF(tau_mem=10.0, tau_adapt=20.0, **kw)
            return sl.LIF(tau_mem=10.0, train_alphas=args.train_alphas, **kw)
        return nn.Sequential(nn.Linear(args.chans, h), neuron(), nn.Linear(h, h), neuron(),
                             nn.Linear(h, 4), sl.ExpLeak(tau_mem=5.0))
    if args.mode == "conv":
        b, t = args.batch, args.time
        net = nn.Sequential(
            nn.Conv2d(2, 4, 3, padding=1, bias=False), sl.IAFSqueeze(batch_size=b),
            nn.AvgPool2d(2), nn.Conv2d(4, 8, 3, padding=1, bias=False),
            sl.IAFSqueeze(num_timesteps=t, spike_fn=SingleSpike, reset_fn=MembraneReset()),
            nn.Flatten(), nn.Linear(8 * 4 * 4, 4, bias=False), sl.IAFSqueeze(batch_size=b))
        with torch.no_grad():                   # weights large enough that the neurons spike
            for m in net:
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    m.weight.mul_(4.0)
        return net
    return nn.Sequential(nn.Linear(args.chans, h),
                         sl.LIFRecurrent(tau_mem=10.0, rec_connect=nn.Linear(h, h)),
                         nn.Linear(h, 4))


def batch_of(args):
    b, t = args.batch, args.time
    y = torch.randint(0, 4, (b,))
    if args.mode == "conv":
        return (torch.rand(b * t, 2, 8, 8) < 0.3).float(), y   # spikes, time in batch
    return torch.rand(b, t, args.chans) * 2, y


def loss_of(model, args, x, y) -> torch.Tensor:
    out = model(x)
    if args.mode == "conv":
        rate = sl.UnflattenTime(args.batch)(out).sum(1)        # (batch, classes)
        loss = F.cross_entropy(rate, y)
    else:
        loss = F.cross_entropy(out[:, -1], y)
    if args.synops:   # the synaptic operations the library's hooks counted, as a penalty
        loss = loss + 1e-4 * model.hook_data["total_synops_per_timestep"]
    return loss


def reset(model, args) -> None:
    """A new sample: the membranes back to zero and cut from the last sample's graph."""
    if args.mode == "rec" and args.bug != "libreset":   # the library's walk passes over
        #                                                 LIFRecurrent (see above)
        for m in model.modules():
            if isinstance(m, sl.StatefulLayer):
                m.reset_states()
                m.zero_grad()
        return
    if args.bug != "detached":
        sinabs.reset_states(model)
    sinabs.zero_grad(model)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="dense", choices=["dense", "conv", "rec"])
    p.add_argument("--neuron", default="lif", choices=["lif", "iaf", "alif"])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--time", type=int, default=6)
    p.add_argument("--chans", type=int, default=8)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--tau-syn", type=float, default=None)
    p.add_argument("--min-vmem", type=float, default=None)
    p.add_argument("--train-alphas", action="store_true")
    p.add_argument("--record", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--synops", action="store_true")
    p.add_argument("--bug", default=None, choices=["noreset", "detached", "libreset"])
    args = p.parse_args()
    torch.manual_seed(0)

    model = build(args)
    if args.synops:   # the library's forward hooks: each Conv2d / Linear counts its synops
        from sinabs.hooks import register_synops_hooks
        register_synops_hooks(model)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            if args.bug != "noreset":
                reset(model, args)
            x, y = batch_of(args)
            loss = loss_of(model, args, x, y)
            (loss / args.accum if args.accum > 1 else loss).backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            reset(model, args)
            with torch.no_grad():
                print(f"validation loss {loss_of(model, args, *batch_of(args)).item():.4f}")
            reset(model, args)


if __name__ == "__main__":
    main()
