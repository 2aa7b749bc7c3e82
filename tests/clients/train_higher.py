"""higher (facebookresearch, 0.2.1): MAML as its README and examples/maml-omniglot.py write
it, shrunk (8 x 8 one-channel "images", 4 ways, 2 shots, 8 channels). For each task of a
meta-batch, `higher.innerloop_ctx(net, inner_opt, copy_initial_weights=False)` gives a
functional copy of the net (`fnet`, its modules new objects whose fast weights are plain
tensors, not nn.Parameters) and a differentiable optimizer (`diffopt`); a few
`diffopt.step(support_loss)` (each an `autograd.grad(create_graph=True)`) unroll the inner
loop, the query loss's backward runs through all of it to the net's parameters, and Adam
steps once per meta-batch.

    python tests/clients/train_higher.py --steps 3
    memledger trace tests/clients/train_higher.py -o h.ledger --steps 2
    memledger predict h.ledger -p 'checkpoint:*' -p 'offload:[0-3]'
    memledger doctor tests/clients/train_higher.py -- --copy-initial

Options: `--model conv|mlp`, `--bn` (BatchNorm with running statistics, as the example:
higher copies them into `fnet`), `--inner N` steps, `--tasks N`, `--inner-opt sgd|momentum|
adam` (higher's DifferentiableSGD / its momentum buffer / DifferentiableAdam, whose state
are differentiable tensors), `--learned-lr` (Meta-SGD: a per-parameter inner learning rate
the meta-optimizer trains, handed in by `override`), `--first-order`
(`track_higher_grads=False`), `--copy-initial` (higher's default `copy_initial_weights=True`:
the fast weights start as detached copies, and the meta-gradient never reaches the net),
`--divide` (the query loss over the tasks), `--eval` (the meta-test loop: inner steps
without higher-order graphs, under the model's eval mode, no meta step).
"""
import argparse

import higher
import torch
import torch.nn.functional as F
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--model", choices=["conv", "mlp"], default="conv")
p.add_argument("--bn", action="store_true")
p.add_argument("--inner", type=int, default=2)
p.add_argument("--tasks", type=int, default=2)
p.add_argument("--inner-opt", choices=["sgd", "momentum", "adam"], default="sgd")
p.add_argument("--learned-lr", action="store_true")
p.add_argument("--first-order", action="store_true")
p.add_argument("--copy-initial", action="store_true")
p.add_argument("--divide", action="store_true")
p.add_argument("--eval", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
WAYS, SHOTS, C, H = 4, 2, 8, 8


def conv_block(cin):
    norm = nn.BatchNorm2d(C, momentum=1.0) if args.bn else nn.Identity()
    return nn.Sequential(nn.Conv2d(cin, C, 3, padding=1), norm, nn.ReLU(), nn.MaxPool2d(2))


if args.model == "conv":
    net = nn.Sequential(conv_block(1), conv_block(C), nn.Flatten(), nn.Linear(C * 2 * 2, WAYS))
else:
    net = nn.Sequential(nn.Flatten(), nn.Linear(H * H, 32), nn.ReLU(), nn.Linear(32, 32),
                        nn.ReLU(), nn.Linear(32, WAYS))

meta_params = list(net.parameters())
override = None
if args.learned_lr:   # Meta-SGD: one inner learning rate per parameter tensor, meta-trained
    lrs = [torch.full((), 0.1, requires_grad=True) for _ in meta_params]
    meta_params += lrs
    override = {"lr": lrs}
meta_opt = torch.optim.Adam(meta_params, lr=1e-3)
if args.inner_opt == "adam":
    inner_opt = torch.optim.Adam(net.parameters(), lr=1e-2)
else:   # a group per tensor where each has its own learned rate (`override` is per group)
    groups = [{"params": [w]} for w in net.parameters()] if args.learned_lr \
        else net.parameters()
    inner_opt = torch.optim.SGD(groups, lr=0.1,
                                momentum=0.9 if args.inner_opt == "momentum" else 0.0)

g = torch.Generator().manual_seed(1)


def task():
    x = torch.randn(2, WAYS * SHOTS, 1, H, H, generator=g)
    y = torch.arange(WAYS).repeat_interleave(SHOTS).expand(2, -1)
    return x[0], y[0], x[1], y[1]


def adapt(fnet, diffopt, x_spt, y_spt):
    for _ in range(args.inner):
        diffopt.step(F.cross_entropy(fnet(x_spt), y_spt))


for step in range(args.steps):
    net.train(not args.eval)
    if args.eval:   # meta-test: adapt a copy, score the query, nothing trains
        x_spt, y_spt, x_qry, y_qry = task()
        with higher.innerloop_ctx(net, inner_opt, track_higher_grads=False) as (fnet, diffopt):
            adapt(fnet, diffopt, x_spt, y_spt)
            with torch.no_grad():
                acc = (fnet(x_qry).argmax(1) == y_qry).float().mean()
        print(step, "acc", acc.item())
        continue
    meta_opt.zero_grad()
    losses = []
    for _ in range(args.tasks):
        x_spt, y_spt, x_qry, y_qry = task()
        with higher.innerloop_ctx(net, inner_opt, copy_initial_weights=args.copy_initial,
                                  override=override,
                                  track_higher_grads=not args.first_order) as (fnet, diffopt):
            adapt(fnet, diffopt, x_spt, y_spt)
            qry_loss = F.cross_entropy(fnet(x_qry), y_qry)
            if args.divide:
                qry_loss = qry_loss / args.tasks
            losses.append(qry_loss.detach())
            qry_loss.backward()
    meta_opt.step()
    print(step, torch.stack(losses).sum().item())
