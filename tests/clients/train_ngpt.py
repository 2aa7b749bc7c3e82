"""nGPT (nGPT-pytorch, lucidrains): the normalized transformer as its README and its
train.py use it, tiny. Every `NormLinear` keeps its weight on the unit hypersphere: by
default through `torch.nn.utils.parametrize` (an `L2Norm` module computes the weight from
`parametrizations.weight.original` at each read), with `--manual` (`manual_norm_weights`)
as a plain weight the loop renormalizes in place after each step. Residuals are a learned
lerp between the stream and the normed branch output, renormed (`Residual`, `Scale`).
The token embedding is read as a weight (`token_embed.weight[ids]`), never called.
Seeded, tiny, nothing downloaded.

    python tests/clients/train_ngpt.py --steps 3
    memledger trace tests/clients/train_ngpt.py --steps 2 -o ngpt.ledger -- --renorm hook
    memledger compare tests/clients/train_ngpt.py -p 'checkpoint:layers.*.*' -- --manual

Options: `--model ngpt` (the LM, `return_loss=True`) or `ntransformer` (`nTransformer` on
random vectors, `norm_input=True`, an MSE to a target); `--renorm hook` (the library's
`register_step_post_hook(optim)`: `norm_weights_()` after each `optim.step()`), `manual`
(the loop calls `model.norm_weights_()` after the step, as train.py does) or `none`;
`--manual` (no parametrization: the weights are plain, only the renorm keeps them
normed), `--tied` (the logits by einsum with the embedding's weight), `--spheres N`
(`num_hyperspheres`), `--norm-eps E`, `--no-value-residual`, `--no-qk-norm`, `--accum N`,
`--amp` (CPU bf16 autocast), `--validate` (a loss under no_grad in eval mode each step),
`--clip` (clip_grad_norm_), `--sgd` (else Adam), `--tokens N` (the vocabulary), `--cached`
(the forward and loss under `torch.nn.utils.parametrize.cached()`: each normed weight
computed once a forward and held to its end).
"""

import argparse
import contextlib

import torch
import torch.nn.functional as F
from torch.nn.utils import parametrize

from nGPT_pytorch import Attention, FeedForward, NormLinear, Scale, nGPT, nTransformer

# nGPT-pytorch 0.2.16 gives nGPT, Attention, FeedForward, NormLinear and Scale an `__eq__`
# (by their sizes, for its evolution code) and so no `__hash__`: `model.parameters()` then
# fails ("unhashable type: 'nGPT'", named_modules keeps a set). A user has to give the hash
# back; equality stays the library's (two Scales of one size compare equal).
for _cls in (nGPT, Attention, FeedForward, NormLinear, Scale):
    _cls.__hash__ = torch.nn.Module.__hash__


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="ngpt", choices=["ngpt", "ntransformer"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim-head", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--renorm", default="hook", choices=["hook", "manual", "none"])
    p.add_argument("--manual", action="store_true")
    p.add_argument("--tied", action="store_true")
    p.add_argument("--spheres", type=int, default=1)
    p.add_argument("--norm-eps", type=float, default=0.0)
    p.add_argument("--no-value-residual", action="store_true")
    p.add_argument("--no-qk-norm", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--clip", action="store_true")
    p.add_argument("--sgd", action="store_true")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--cached", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = args.tokens
    common = dict(dim=args.dim, depth=args.depth, heads=args.heads, dim_head=args.dim_head,
                  manual_norm_weights=args.manual, num_hyperspheres=args.spheres,
                  norm_eps=args.norm_eps, attn_norm_qk=not args.no_qk_norm,
                  ff_expand_factor=2.0)
    if args.model == "ngpt":
        model = nGPT(num_tokens=num_tokens, tied_embedding=args.tied,
                     add_value_residual=not args.no_value_residual, **common)

        def loss_of() -> torch.Tensor:
            ids = torch.randint(0, num_tokens, (args.batch, args.seq_len + 1))
            return model(ids, return_loss=True)
    else:
        model = nTransformer(**common)

        def loss_of() -> torch.Tensor:
            x = torch.randn(args.batch, args.seq_len, args.dim)
            target = F.normalize(torch.randn(args.batch, args.seq_len, args.dim), dim=-1)
            return F.mse_loss(model(x, norm_input=True), target)

    if args.sgd:
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    else:
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    if args.renorm == "hook":
        if args.model == "ngpt":
            model.register_step_post_hook(optim)
        else:   # nTransformer has no such method: the same hook, by hand
            optim.register_step_post_hook(lambda *_: model.norm_weights_())

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp), \
                    (parametrize.cached() if args.cached else contextlib.nullcontext()):
                loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        if args.renorm == "manual":
            model.norm_weights_()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
