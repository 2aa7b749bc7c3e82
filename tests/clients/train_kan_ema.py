"""pykan's KAN, and torch-ema's moving average over a model trained with MADGRAD, as their
READMEs use them. Seeded, tiny, nothing downloaded.

    python tests/clients/train_kan_ema.py --steps 3 --model kan --fit
    memledger trace tests/clients/train_kan_ema.py --steps 2 -o kan.ledger -- --model kan
    memledger compare tests/clients/train_kan_ema.py -p 'checkpoint:act_fun.*' -- --model kan

Models (`--model`):

- `kan`: pykan's `KAN(width=[2, 5, 1], grid=5, k=3)` (a `MultKAN`: per layer a `KANLayer`
  of B-spline edge functions, `act_fun.*`, and a `Symbolic_KANLayer`, `symbolic_fun.*`,
  which adds nothing until an edge is fixed symbolic) on `create_dataset`'s
  `exp(sin(pi x0) + x1^2)`, 64 train and 64 test points. `--fit` trains it as the README
  does, `model.fit(dataset, opt=..., steps=...)`: each step a forward on the train points
  (with `lamb > 0` the regularizer over the activations the forward kept on the model),
  backward, step, then a loss on the test points with grad enabled, the grid refit to the
  inputs every few steps (`update_grid`). `--opt lbfgs` (the default, pykan's own LBFGS
  copy, strong-Wolfe line search: many closures a step), `adam`, `madgrad`, `mirror`
  (MADGRAD and MirrorMADGRAD in the user's own loop; `fit` takes only LBFGS and Adam).
  Without `--fit` the loop is the user's: `model(x)` on the train points, MSE, backward,
  step (LBFGS through a closure). `--lamb L` (the sparsity regularizer), `--no-save-act`
  (`save_act=False`: the forward keeps no activations), `--ckpt DIR` (`auto_save=True`,
  `ckpt_path=DIR`: pykan writes its checkpoints and history.txt there; without it
  `auto_save=False`, where the library's default would write `./model`), `--batch N`
  (`fit(batch=N)`).
- `mlp`: a 3-layer MLP (16 -> 32 -> 32 -> 4, GELU, LayerNorm) on random vectors,
  MSE, `--opt madgrad` (the default) or `mirror`, `adam`; `--decay W` (weight_decay;
  `--decouple`), `--momentum M`.

Both: `--ema D` (torch-ema's `ExponentialMovingAverage(model.parameters(), decay=D)`,
`ema.update()` after each step, and an evaluation under `with ema.average_parameters():`
and no_grad each step), `--accum N` (gradient accumulation, the user's loop only).
"""

import argparse
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, dim: int = 16, hidden: int = 32, out: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.fc1(x))
        x = F.gelu(self.fc2(self.norm(x)))
        return self.head(x)


def optimizer_for(name: str, params, args):
    import madgrad

    if name == "madgrad":
        return madgrad.MADGRAD(params, lr=args.lr, momentum=args.momentum,
                               weight_decay=args.decay, decouple_decay=args.decouple)
    if name == "mirror":
        return madgrad.MirrorMADGRAD(params, lr=args.lr, momentum=args.momentum,
                                     weight_decay=args.decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=args.lr)
    from kan.LBFGS import LBFGS   # the copy `fit` uses

    return LBFGS(params, lr=1.0, history_size=10, line_search_fn="strong_wolfe",
                 tolerance_grad=1e-32, tolerance_change=1e-32, tolerance_ys=1e-32)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="kan", choices=["kan", "mlp"])
    p.add_argument("--fit", action="store_true")
    p.add_argument("--opt", default=None, choices=["lbfgs", "adam", "madgrad", "mirror"])
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--lamb", type=float, default=0.0)
    p.add_argument("--no-save-act", action="store_true")
    p.add_argument("--no-grid", action="store_true")
    p.add_argument("--ckpt", default=None)
    p.add_argument("--batch", type=int, default=-1)
    p.add_argument("--decay", type=float, default=0.0)
    p.add_argument("--decouple", action="store_true")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--ema", type=float, default=None)
    p.add_argument("--accum", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(0)
    opt_name = args.opt or ("lbfgs" if args.model == "kan" else "madgrad")
    if args.lr is None:
        args.lr = 1.0 if opt_name == "lbfgs" else 1e-2

    if args.model == "kan":
        from kan import KAN
        from kan.utils import create_dataset

        model = KAN(width=[2, 5, 1], grid=5, k=3, seed=1, save_act=not args.no_save_act,
                    auto_save=args.ckpt is not None,
                    ckpt_path=args.ckpt or tempfile.gettempdir() + "/kan-unused")
        f = lambda x: torch.exp(torch.sin(torch.pi * x[:, [0]]) + x[:, [1]] ** 2)  # noqa: E731
        data = create_dataset(f, n_var=2, train_num=64, test_num=64)
        params = model.get_params()
    else:
        model = MLP()
        gen = torch.Generator().manual_seed(1)
        data = {"train_input": torch.randn(32, 16, generator=gen),
                "train_label": torch.randn(32, 4, generator=gen),
                "test_input": torch.randn(32, 16, generator=gen),
                "test_label": torch.randn(32, 4, generator=gen)}
        params = list(model.parameters())

    ema = None
    if args.ema is not None:
        from torch_ema import ExponentialMovingAverage

        ema = ExponentialMovingAverage(model.parameters(), decay=args.ema)

    if args.fit:
        assert args.model == "kan" and opt_name in ("lbfgs", "adam"), "fit: a KAN, LBFGS or Adam"
        model.fit(data, opt="LBFGS" if opt_name == "lbfgs" else "Adam", steps=args.steps,
                  lamb=args.lamb, lr=args.lr, batch=args.batch,
                  update_grid=not args.no_grid, grid_update_num=2, stop_grid_update_step=4)
        return

    optim = optimizer_for(opt_name, params, args)
    x, y = data["train_input"], data["train_label"]
    micro = x.shape[0] // args.accum
    for _ in range(args.steps):
        if opt_name == "lbfgs":
            def closure():
                optim.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                return loss

            optim.step(closure)
        else:
            for i in range(args.accum):
                part = slice(i * micro, (i + 1) * micro)
                loss = F.mse_loss(model(x[part]), y[part])
                if args.lamb and args.model == "kan":
                    loss = loss + args.lamb * model.get_reg("edge_forward_spline_n", 1.0,
                                                            2.0, 0.0, 0.0)
                (loss / args.accum).backward()
            optim.step()
            optim.zero_grad(set_to_none=True)
        if ema is not None:
            ema.update()
            with torch.no_grad(), ema.average_parameters():
                F.mse_loss(model(data["test_input"]), data["test_label"])


if __name__ == "__main__":
    main()
