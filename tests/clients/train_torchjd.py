"""Jacobian descent with torchjd, as its documentation's examples write it: the loop never
calls `loss.backward()`. `torchjd.autojac.backward(losses)` (or `mtl_backward(losses,
features)`) computes the Jacobian of several losses with respect to the parameters, one
row per loss, by a vmapped `torch.autograd.grad` (or one pass per row with
`parallel_chunk_size=1`) and keeps it in each parameter's `.jac`; `jac_to_grad(params,
aggregator)` aggregates those rows (UPGrad, MGDA, Mean) into `.grad` and deletes `.jac`; then
the optimizer steps as usual. The autogram engine instead hooks the model's layers, takes
the Gramian of the per-example Jacobian in one `autograd.grad(retain_graph=True)` and
backpropagates the weighted losses with `losses.backward(weights)`. Random data, seeded,
nothing downloaded.

    python tests/clients/train_torchjd.py --steps 3 --mode jd
    memledger trace tests/clients/train_torchjd.py --steps 2 -o jd.ledger -- --mode mtl

Modes (`--mode`):

- `jd`: basic usage: a residual MLP with two outputs, two MSE losses, `autojac.backward`,
  `jac_to_grad(model.parameters(), UPGrad())`, SGD.
- `mtl`: multi-task learning: a shared trunk and two task heads (three modules, one SGD
  over all their parameters), `mtl_backward([loss1, loss2], features=features)`,
  `jac_to_grad(trunk.parameters(), UPGrad())`; the heads' gradients are plain ones.
- `mean`: `jd` with the `Mean` aggregator and Adam.
- `mgda`: `mtl` with `MGDA`.
- `iwrm`: instance-wise risk minimisation: one loss per example (`MSELoss(reduction=
  "none")`), its 16-row Jacobian by one vmapped backward, UPGrad.
- `iwrm-seq`: `iwrm` with `parallel_chunk_size=1`: one backward pass per example, the
  graph retained between them.
- `gramian`: `iwrm` aggregated by `jac_to_grad(..., optimize_gramian_computation=True)`.
- `autogram`: `iwrm` by the autogram engine (`Engine(model, batch_dim=0)`,
  `UPGradWeighting`, `losses.backward(weights)`).
- `iwmtl`: instance-wise multi-task learning with the autogram engine on the shared trunk
  (a [16, 2] matrix of losses).
- `per-layer`: `mtl` with one stateful `GradVac` aggregator per leaf layer of the trunk
  (torchjd's grouping example, "per layer": an EMA of cosine similarities kept in a buffer).
- `amp`: `mtl` under CPU autocast (float16) with a `GradScaler`, as torchjd's AMP example:
  `mtl_backward(scaler.scale([loss1, loss2]), ...)`, `scaler.step(optimizer)`.

`--bug no-aggregate`: `jd` without `jac_to_grad` (the Jacobians stay in `.jac`, `.grad` stays
None and every step changes nothing: the doctor's `no_gradient`).

`--no-batch-dim`: the autogram engine with `batch_dim=None` (each hooked layer's Jacobian by
`autograd.grad` inside backward); with `batch_dim=0` it takes them by `torch.func.vjp`, which
refuses the saved-tensor hooks memledger traces with, so `trace` stops in one line there.
"""

import argparse

import torch
from torch import nn

from torchjd.aggregation import MGDA, GradVac, Mean, UPGrad, UPGradWeighting
from torchjd.autogram import Engine
from torchjd.autojac import backward, jac_to_grad, mtl_backward

IN, DIM, BATCH = 10, 32, 16
MODES = ["jd", "mtl", "mean", "mgda", "iwrm", "iwrm-seq", "gramian", "autogram", "iwmtl",
         "amp", "per-layer"]


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(x)))


class Net(nn.Module):
    """A residual MLP: `inp`, `blocks.*`, and a head of `outputs` values (0: the features)."""

    def __init__(self, depth: int, outputs: int) -> None:
        super().__init__()
        self.inp = nn.Linear(IN, DIM)
        self.blocks = nn.ModuleList(Block(DIM) for _ in range(depth))
        self.head = nn.Linear(DIM, outputs) if outputs else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="jd", choices=MODES)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--no-batch-dim", action="store_true")
    p.add_argument("--batch", type=int, default=BATCH)
    p.add_argument("--bug", choices=["no-aggregate"])
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    mode = args.mode

    if mode in ("mtl", "mgda", "iwmtl", "amp", "per-layer"):
        trunk = Net(args.depth, 0)
        task1, task2 = nn.Linear(DIM, 1), nn.Linear(DIM, 1)
        params = [*trunk.parameters(), *task1.parameters(), *task2.parameters()]
        optimizer = torch.optim.SGD(params, lr=0.1)
    else:
        model = Net(args.depth, 2 if mode in ("jd", "mean") else 1)
        optimizer = (torch.optim.Adam(model.parameters(), lr=1e-3) if mode == "mean"
                     else torch.optim.SGD(model.parameters(), lr=0.1))
    aggregator = {"mean": Mean(), "mgda": MGDA()}.get(mode, UPGrad())
    if mode == "per-layer":
        leaf_layers = [m for m in trunk.modules()
                       if list(m.parameters()) and not list(m.children())]
        layer_aggregators = [GradVac() for _ in leaf_layers]
    weighting = UPGradWeighting()
    batch_dim = None if args.no_batch_dim else 0
    if mode == "autogram":
        engine = Engine(model, batch_dim=batch_dim)
    elif mode == "iwmtl":
        engine = Engine(trunk, batch_dim=batch_dim)
    scaler = torch.amp.GradScaler(device="cpu")
    per_example = nn.MSELoss(reduction="none")
    loss_fn = nn.MSELoss()

    for step in range(args.steps):
        x = torch.randn(args.batch, IN, generator=gen)
        y1 = torch.randn(args.batch, generator=gen)
        y2 = torch.randn(args.batch, generator=gen)
        if mode in ("jd", "mean"):
            out = model(x)
            losses = [loss_fn(out[:, 0], y1), loss_fn(out[:, 1], y2)]
            backward(losses)
            if args.bug != "no-aggregate":
                jac_to_grad(model.parameters(), aggregator)
        elif mode in ("mtl", "mgda", "per-layer"):
            features = trunk(x)
            loss1 = loss_fn(task1(features).squeeze(1), y1)
            loss2 = loss_fn(task2(features).squeeze(1), y2)
            losses = torch.stack([loss1, loss2]).detach()
            mtl_backward([loss1, loss2], features=features)
            if mode == "per-layer":
                for layer, layer_aggregator in zip(leaf_layers, layer_aggregators):
                    jac_to_grad(layer.parameters(), layer_aggregator)
            else:
                jac_to_grad(trunk.parameters(), aggregator)
        elif mode == "amp":
            with torch.autocast(device_type="cpu", dtype=torch.float16):
                features = trunk(x)
                loss1 = loss_fn(task1(features).squeeze(1), y1)
                loss2 = loss_fn(task2(features).squeeze(1), y2)
            losses = torch.stack([loss1, loss2]).detach()
            mtl_backward(scaler.scale([loss1, loss2]), features=features)
            jac_to_grad(trunk.parameters(), aggregator)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            with torch.no_grad():
                mean = losses.float().mean()
            print(f"step {step}  loss {mean.item():.4f}")
            continue
        elif mode in ("iwrm", "iwrm-seq", "gramian"):
            losses = per_example(model(x).squeeze(1), y1)          # (B,)
            backward(losses, parallel_chunk_size=1 if mode == "iwrm-seq" else None)
            jac_to_grad(model.parameters(), aggregator,
                        optimize_gramian_computation=mode == "gramian")
        elif mode == "autogram":
            losses = per_example(model(x).squeeze(1), y1)          # (B,)
            gramian = engine.compute_gramian(losses)               # (B, B)
            losses.backward(weighting(gramian))
        else:   # iwmtl
            features = trunk(x)
            out1, out2 = task1(features).squeeze(1), task2(features).squeeze(1)
            losses = torch.stack([per_example(out1, y1), per_example(out2, y2)], dim=1)
            gramian = engine.compute_gramian(losses)               # (2B, 2B)
            losses.backward(weighting(gramian).reshape(losses.shape))
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            mean = torch.stack(list(losses)).mean() if isinstance(losses, list) \
                else losses.mean()
        print(f"step {step}  loss {mean.item():.4f}")


if __name__ == "__main__":
    main()
