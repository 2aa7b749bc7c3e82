"""product-key-memory (lucidrains) as its README and its train.py use it: the library's own
`Transformer` (causal attention, a `PKM` layer in place of one feed-forward: product keys,
a top-k over each half's sub-keys, a top-k over their sums, an `EmbeddingBag` of values
summed under the softmaxed scores), trained with Adam on the README's two parameter
groups (`fetch_optimizer_parameters`: the memory's values at their own learning rate),
`clip_grad_norm_`, `optim.step(); optim.zero_grad()`, `--accumulate` backward passes per
step, and a no_grad validation loss plus a sample from `generate` every
`--validate-every` steps.

Options of the layer (`pkm_kwargs`), each as the README documents it:
  --concat        `concat_values_and_combine=True` (an `Embedding` of values per head,
                  summed per head and projected)
  --difftopk      `differentiable_topk=True` (CoLT5's coordinate-descent top-k,
                  straight-through gates)
  --batchnorm     `use_layernorm=False`: a BatchNorm1d over the queries under
                  `MaskedBatchNorm1D` (the PKM called with an `input_mask` a row per
                  query head: it writes the normed rows back into the queries in place)
  --gumbel S      `gumbel_noise_scale=S` at train time
  --mem-mask      `mem_trainable_mask`: half the memories frozen (straight-through;
                  with --concat only: summed by the EmbeddingBag, the mask's shape does
                  not broadcast against the values)
  --sparse        the values' EmbeddingBag with `sparse=True`, stepped by SparseAdam
                  (the sparse-update advice of the PKM paper) beside Adam for the rest
  --dropout P     input, query, value and attention dropouts of the layer

Tiny, seeded, random tokens, nothing downloaded.

    python tests/clients/train_pkm.py --steps 3
    memledger trace tests/clients/train_pkm.py --steps 2 -o pkm.ledger
    memledger predict pkm.ledger --policy 'checkpoint:layers.*.1'
"""

import argparse

import torch
from torch import nn

from product_key_memory import PKM, fetch_optimizer_parameters, fetch_pkm_value_parameters
from product_key_memory.transformer import Transformer


class Masked(nn.Module):
    """The PKM called with the mask the README passes (`input_mask`), as a feed-forward
    of the library's Transformer would be called with none."""

    def __init__(self, pkm: PKM, mask: torch.Tensor | None):
        super().__init__()
        self.pkm, self.mask = pkm, mask

    def forward(self, x):
        kw = {}
        if self.mask is not None:
            kw["input_mask"] = self.mask
        if self.gumbel and self.training:
            kw["gumbel_noise_scale"] = self.gumbel
        if self.mem_mask is not None:
            kw["mem_trainable_mask"] = self.mem_mask
        return self.pkm(x, **kw)


def build(args):
    d = args.dropout
    pkm_kwargs = dict(heads=2, num_keys=args.keys, topk=args.topk, dim_head=args.dim // 2,
                      input_dropout=d, query_dropout=d, value_dropout=d, attn_dropout=d,
                      use_layernorm=not args.batchnorm,
                      differentiable_topk=args.difftopk,
                      concat_values_and_combine=args.concat)
    model = Transformer(dim=args.dim, num_tokens=args.tokens, depth=args.depth,
                        seq_len=args.seq, pkm_layers=tuple(args.pkm_layers), dim_head=8,
                        heads=2, pkm_kwargs=pkm_kwargs)
    mask = torch.ones(args.batch, args.seq, dtype=torch.bool) if args.batchnorm else None
    if mask is not None and args.seq > 2:
        mask[0, -2:] = False   # a padded row
        # the layer norms queries of shape ((b 2 h), t, d) under the mask: one row a head
        mask = mask.repeat_interleave(4, dim=0)
    mem_mask = None
    if args.mem_mask:
        mem_mask = torch.zeros(args.keys ** 2, dtype=torch.bool)
        mem_mask[::2] = True
    for layer in model.layers:
        if isinstance(layer[1], PKM):
            if args.sparse:
                layer[1].values.sparse = True
            w = Masked(layer[1], mask)
            w.gumbel, w.mem_mask = args.gumbel, mem_mask
            layer[1] = w
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--pkm-layers", type=int, nargs="+", default=[1])
    ap.add_argument("--keys", type=int, default=8)
    ap.add_argument("--topk", type=int, default=4)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--concat", action="store_true")
    ap.add_argument("--difftopk", action="store_true")
    ap.add_argument("--batchnorm", action="store_true")
    ap.add_argument("--gumbel", type=float, default=0.0)
    ap.add_argument("--mem-mask", action="store_true")
    ap.add_argument("--sparse", action="store_true")
    ap.add_argument("--accumulate", type=int, default=1)
    ap.add_argument("--validate-every", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = build(args)
    if args.sparse:
        values, rest = fetch_pkm_value_parameters(model)
        optims = [torch.optim.Adam(rest, lr=1e-3), torch.optim.SparseAdam(values, lr=1e-2)]
    else:
        optims = [torch.optim.Adam(fetch_optimizer_parameters(model, 1e-2), lr=1e-3)]
    clipped = [p for p in model.parameters() if not (args.sparse and p.ndim == 2
                                                    and p.shape[0] == args.keys ** 2)]
    for i in range(args.steps):
        model.train()
        for _ in range(args.accumulate):
            x = torch.randint(0, args.tokens, (args.batch, args.seq + 1))
            loss = model(x)
            (loss / args.accumulate).backward()
        print(f"training loss: {loss.item():.4f}")
        torch.nn.utils.clip_grad_norm_(clipped, 0.5)
        for opt in optims:
            opt.step()
        for opt in optims:
            opt.zero_grad()
        if args.validate_every and i % args.validate_every == 0:
            model.eval()
            with torch.no_grad():
                x = torch.randint(0, args.tokens, (args.batch, args.seq + 1))
                print(f"validation loss: {model(x).item():.4f}")
            sample = model.generate(x[:1, :4], 4)
            print("sample:", sample.tolist())


if __name__ == "__main__":
    main()
