"""tensorly-torch (tests/clients/train_tltorch.py): factorized layers whose weights are
CP / Tucker / TT / block-TT tensors (`tltorch.FactorizedTensor` modules, the factors the
real nn.Parameters), rebuilt into a dense weight in the forward (`implementation=
'reconstructed'`) or contracted with the input factor by factor (`'factorized'`), a tensor
regression head (`TRL`), a tensor contraction layer (`TCL`), a factorized embedding, tensor
dropout (a forward hook on the factorized weight that samples its rank each call) and the
tensor lasso (a forward hook adding an l1 term that the loop adds to the loss, then resets).
Seeded, tiny, random data, nothing downloaded.

    python tests/clients/train_tltorch.py --steps 3 --model cnn
    memledger trace tests/clients/train_tltorch.py --steps 2 -o t.ledger -- --model mlp
    memledger compare tests/clients/train_tltorch.py -p 'checkpoint:@FactorizedLinear' -- --model mlp

Models (`--model`):

- `cnn`: a conv stem, a Tucker-factorized `FactorizedConv` (3x3), ReLU, a TCL and a CP
  `TRL` head onto 10 classes; cross-entropy.
- `mlp`: `layers` blocks of a CP `FactorizedLinear` (in 4x4x4 -> out 4x4x4) and a
  block-TT one, each followed by GELU; a Tucker `TRL` head; MSE.
- `seq`: a block-TT `FactorizedEmbedding` (vocabulary 64, dim 32), a CP `FactorizedLinear`
  mixing, a running mean over time and a block-TT `FactorizedLinear` onto the vocabulary;
  next-token cross-entropy.

`--model mlp` only: `--lib-checkpoint` (the layers' own `checkpointing=True`: torch's
checkpoint around each contraction), `--from-dense` (each CP layer made from an
`nn.Linear` by `FactorizedLinear.from_linear`, a CP decomposition of its weight),
`--shared` (the CP layers index one `n_layers` tensor through `get_linear(i)`).

Options: `--impl factorized|reconstructed` (every factorized layer's implementation),
`--dropout P` (tensor dropout on every factorized weight, training only; `--eval-every`
runs an evaluation under no_grad in eval mode, where it is off), `--lasso` (a CP / Tucker
tensor lasso on the factorized weights, its term added to the loss and reset each step),
`--optim adamw|sgd`, `--accum N`, `--clip C`, `--batch`.
`--bug lasso-after-optim`: the lasso applied after the optimizer was built, so its lasso
weights (new parameters) are never handed to the optimizer.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import tltorch


class ConvNet(nn.Module):
    def __init__(self, impl: str) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.fconv = tltorch.FactorizedConv(8, 8, 3, order=2, factorization="tucker",
                                            rank=0.5, implementation=impl, padding=1)
        self.fconv.reset_parameters()   # its __init__ leaves the factors torch.empty
        self.tcl = tltorch.TCL((8, 8, 8), rank=(4, 4, 4))
        self.trl = tltorch.TRL((4, 4, 4), (10,), rank=6, factorization="cp")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem(x))
        x = F.relu(self.fconv(x))
        x = F.max_pool2d(x, 2)                      # (B, 8, 8, 8)
        return self.trl(self.tcl(x))                # (B, 10)


class FactorizedMLP(nn.Module):
    def __init__(self, impl: str, layers: int, ckpt: bool = False, dense: bool = False,
                 shared: bool = False) -> None:
        super().__init__()
        blocks = []
        if shared:   # one CP tensor of shape (layers, out, in): the layers index into it
            self.stack = tltorch.FactorizedLinear((4, 4, 4), (4, 4, 4), factorization="cp",
                                                  rank=0.5, implementation=impl,
                                                  n_layers=layers, checkpointing=ckpt)
        for i in range(layers):
            if shared:
                first = self.stack.get_linear(i)
            elif dense:   # a dense layer, then decomposed (the README's from_linear)
                first = tltorch.FactorizedLinear.from_linear(
                    nn.Linear(64, 64), rank=0.5, factorization="cp", implementation=impl,
                    n_tensorized_modes=3, checkpointing=ckpt,
                    decomposition_kwargs=dict(init="random", n_iter_max=5))
            else:
                first = tltorch.FactorizedLinear((4, 4, 4), (4, 4, 4), factorization="cp",
                                                 rank=0.5, implementation=impl,
                                                 checkpointing=ckpt)
            blocks += [first, nn.GELU(),
                       tltorch.FactorizedLinear((4, 4, 4), (4, 4, 4), factorization="blocktt",
                                                rank=0.5, implementation=impl,
                                                checkpointing=ckpt), nn.GELU()]
        self.blocks = nn.Sequential(*blocks)
        self.head = tltorch.TRL((64,), (8,), rank=4, factorization="tucker")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


class TinySeq(nn.Module):
    def __init__(self, impl: str, vocab: int = 64, dim: int = 32) -> None:
        super().__init__()
        self.embed = tltorch.FactorizedEmbedding(vocab, dim, factorization="blocktt", rank=4)
        self.mix = tltorch.FactorizedLinear((4, 8), (4, 8), factorization="cp", rank=0.5,
                                            implementation=impl)
        self.out = tltorch.FactorizedLinear((4, 8), (8, 8), factorization="blocktt", rank=0.5,
                                            implementation=impl)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)                                  # (B, T, dim)
        h = h + F.gelu(self.mix(h))
        h = torch.cumsum(h, dim=1) / torch.arange(1, h.shape[1] + 1).view(1, -1, 1)
        return self.out(h)                                      # (B, T, vocab)


def factorized_weights(model: nn.Module) -> list:
    # tensor dropout and the lasso know CPTensor / TuckerTensor (/ TTTensor) by class name:
    # a FactorizedLinear's CPTensorized or BlockTT raises KeyError there (tltorch 0.5.0)
    return [m for m in model.modules() if type(m).__name__ in {"CPTensor", "TuckerTensor"}]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="mlp", choices=["cnn", "mlp", "seq"])
    p.add_argument("--impl", default="factorized", choices=["factorized", "reconstructed"])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lasso", action="store_true")
    p.add_argument("--optim", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--lib-checkpoint", action="store_true")
    p.add_argument("--from-dense", action="store_true")
    p.add_argument("--shared", action="store_true")
    p.add_argument("--bug", default="", choices=["", "lasso-after-optim"])
    args = p.parse_args()
    torch.manual_seed(0)

    if args.model == "cnn":
        model = ConvNet(args.impl)
    elif args.model == "mlp":
        model = FactorizedMLP(args.impl, args.layers, args.lib_checkpoint, args.from_dense,
                              args.shared)
    else:
        model = TinySeq(args.impl)

    weights = factorized_weights(model)
    lasso = None

    def apply_lasso():
        # one lasso per factorization (its hook knows one); the first weight's kind
        nonlocal lasso
        kind = type(weights[0]).__name__.replace("Tensor", "").lower()
        lasso = tltorch.tensor_lasso(factorization=kind, penalty=0.01)
        for w in weights:
            if type(w).__name__.replace("Tensor", "").lower() == kind:
                lasso.apply(w)

    # the lasso's hooks before dropout's: a forward hook runs in the order registered, and
    # the Tucker lasso's weights have the full rank that dropout has just sampled down
    if args.lasso and not args.bug:
        apply_lasso()
    if args.dropout:
        for w in weights:
            tltorch.tensor_dropout(w, p=args.dropout, min_dim=1)
    if args.optim == "adamw":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    else:
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    if args.lasso and args.bug == "lasso-after-optim":
        apply_lasso()

    def batch():
        if args.model == "cnn":
            return torch.randn(args.batch, 3, 16, 16), torch.randint(0, 10, (args.batch,))
        if args.model == "mlp":
            x = torch.randn(args.batch, 64)
            return x, torch.tanh(x[:, :8])
        tok = torch.randint(0, 64, (args.batch, 9))
        return tok[:, :-1], tok[:, 1:]

    def loss_of(x, y):
        out = model(x)
        if args.model == "mlp":
            return F.mse_loss(out, y)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            x, y = batch()
            loss = loss_of(x, y)
            if lasso is not None:
                loss = loss + lasso.loss
            (loss / args.accum).backward()
            if lasso is not None:
                lasso.reset()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.eval_every and (step + 1) % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                print(f"eval loss {loss_of(*batch()).item():.4f}")


if __name__ == "__main__":
    main()
