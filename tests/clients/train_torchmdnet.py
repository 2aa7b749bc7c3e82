"""torchmd-net (tests/clients/train_torchmdnet.py): neural network potentials for molecular
dynamics, built as its training script does (`torchmdnet.models.model.create_model` from an
args dict: a representation network, a `Scalar` output head, optional priors), trained on
random small molecules (atomic numbers `z`, positions `pos`, a `batch` vector) for energies
and, with `derivative=True`, forces: the model takes `-dE/dpos` by `torch.autograd.grad(...,
create_graph=True)` inside its forward, and the loss's backward then runs through that
backward (a double backward). The neighbor list is the library's own (`OptimizedDistance`:
warp's brute-force kernel as a `torch.library` custom op on CPU). Seeded, tiny, nothing
downloaded.

    python tests/clients/train_torchmdnet.py --steps 3 --model tensornet
    memledger trace tests/clients/train_torchmdnet.py --steps 2 -o t.ledger -- --model et
    memledger compare tests/clients/train_torchmdnet.py -p 'checkpoint:@Interaction'

Options: `--model tensornet|et|transformer|graph-network`, `--energy-only` (no forces),
`--prior` (an `Atomref` prior plus a `ZBL` repulsion prior), `--layers`, `--width`,
`--molecules`, `--atoms` (per molecule), `--opt adamw|sgd`, `--scheduler` (the library's
`ReduceLROnPlateau` on the training loss), `--clip` (gradient norm), `--accum N`,
`--ema A` (the library's exponential moving average of each loss, `LNNP._update_loss_with
_ema`, with its `.detach()`), `--validate` (a validation loss each step in eval mode,
forces taken without a graph), and the loop bug `--ema-no-detach` (the EMA kept without
`.detach()`: each step's loss graph carried into the next).
"""

import argparse

import torch
from torch.nn.functional import mse_loss

from torchmdnet.models.model import create_model

MODELS = {"tensornet": "tensornet", "et": "equivariant-transformer",
          "transformer": "transformer", "graph-network": "graph-network"}


def model_args(a) -> dict:
    """The args dict `torchmd-train`'s parser makes (scripts/train.py), tiny sizes."""
    prior = [{"Atomref": {"max_z": 10}},
             {"ZBL": {"cutoff_distance": 3.0, "max_num_neighbors": 16,
                      "atomic_number": list(range(10)),
                      "distance_scale": 1e-10, "energy_scale": 1.60218e-19}}] \
        if a.prior else None
    return dict(model=MODELS[a.model], precision=32, embedding_dimension=a.width,
                num_layers=a.layers, num_rbf=8, rbf_type="expnorm", trainable_rbf=False,
                activation="silu", cutoff_lower=0.0, cutoff_upper=4.0, max_z=10,
                max_num_neighbors=16, derivative=not a.energy_only, atom_filter=-1,
                prior_model=prior, output_model="Scalar", reduce_op="add",
                attn_activation="silu", num_heads=2, distance_influence="both",
                neighbor_embedding=True, equivariance_invariance_group="O(3)", aggr="add")


def molecules(n: int, atoms: int, gen: torch.Generator):
    """`n` random molecules of `atoms` atoms each: z in 1..9, positions in a 3 Å box."""
    z = torch.randint(1, 10, (n * atoms,), generator=gen)
    pos = 3.0 * torch.rand(n * atoms, 3, generator=gen)
    batch = torch.arange(n).repeat_interleave(atoms)
    y = torch.randn(n, 1, generator=gen)
    neg_dy = torch.randn(n * atoms, 3, generator=gen)
    return z, pos, batch, y, neg_dy


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="tensornet", choices=list(MODELS))
    p.add_argument("--energy-only", action="store_true")
    p.add_argument("--prior", action="store_true")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--molecules", type=int, default=2)
    p.add_argument("--atoms", type=int, default=6)
    p.add_argument("--opt", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--scheduler", action="store_true")
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--ema", type=float, default=1.0)
    p.add_argument("--ema-no-detach", action="store_true")
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    model = create_model(model_args(args))
    if args.opt == "adamw":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    else:
        optim = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(optim, "min", factor=0.8, patience=0,
                                                       min_lr=1e-6) if args.scheduler else None
    ema: dict[str, torch.Tensor] = {}

    def with_ema(name: str, loss: torch.Tensor) -> torch.Tensor:
        # LNNP._update_loss_with_ema: alpha * loss + (1 - alpha) * the last EMA, kept per
        # stage (train / val) and per loss
        if not 0 < args.ema < 1:
            return loss
        loss = args.ema * loss + (1 - args.ema) * ema.get(name, loss.detach())
        ema[name] = loss if args.ema_no_detach else loss.detach()
        return loss

    def loss_of(data, stage: str = "train") -> torch.Tensor:
        z, pos, batch, y, neg_dy = data
        pred, neg_pred = model(z, pos, batch=batch)
        loss = with_ema(stage + "_y", mse_loss(pred, y))
        if not args.energy_only:
            loss = loss + with_ema(stage + "_neg_dy", mse_loss(neg_pred, neg_dy))
        return loss

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = loss_of(molecules(args.molecules, args.atoms, gen))
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        optim.zero_grad()
        if sched is not None:
            sched.step(loss.item())
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            # forces need gradients even in validation (LNNP.step: set_grad_enabled)
            with torch.set_grad_enabled(not args.energy_only):
                val = loss_of(molecules(args.molecules, args.atoms, gen), "val")
            print(f"validation loss {val.item():.4f}")


if __name__ == "__main__":
    main()
