"""st-moe-pytorch (lucidrains' ST-MoE) trained as its README uses it: `MoE(dim, num_experts,
gating_top_n=2, capacity_factor_train=..., ...)` returns `(out, total_aux_loss,
balance_loss, router_z_loss)`; the task loss plus `total_aux_loss` (the balance loss and the
router z-loss, each times its coefficient) is what backward runs; `SparseMoEBlock(moe,
add_ff_before=..., add_ff_after=...)` wraps the layer in an RMSNorm, a residual and
feedforwards.

Modes:
  moe          one `MoE` layer on random tokens, regression (MSE + aux loss), Adam
  block        one `SparseMoEBlock` (ff before and after) on random tokens
  sparse       16 experts, 1 sequence of 8 tokens: most experts get no token in a step
               (their capacity slots are all zeros; their gradients exact zeros)
  modulelist   the experts handed in as an `nn.ModuleList` of the user's own
               (Linear-GELU-Linear), `gating_top_n=3`
  noise        gumbel-noised gates (`noise_gates=True`): random routing each step
  coor         `differentiable_topk=True`: coordinate-descent top-k (20 iterations)
  transformer  a small causal language model: embedding, `blocks.*` of attention and a
               `SparseMoEBlock`, the blocks' aux losses summed into the loss, AdamW, clipping;
               `--eval-every N` runs a validation batch under `no_grad` in eval mode (the
               eval capacity factor, 2.0 against training's 1.25) every N steps
  --amp        the forward and the loss under CPU autocast (bf16), any mode
  --no-aux     train on the task loss alone: the balance and z-losses are still
               returned, and kept until the next step's forward rebinds them
  --eval-with-grad  (transformer) the validation forward without `no_grad` (a common slip)
  --accum N    (transformer) N micro-batches per optimizer step
  --aux-backward  (layer modes) `loss.backward(retain_graph=True)`, then `aux.backward()`

Tiny, seeded, random data, nothing downloaded.

    python tests/clients/train_stmoe.py --mode transformer --steps 3
    memledger trace tests/clients/train_stmoe.py --steps 2 -o moe.ledger -- --mode transformer
    memledger predict moe.ledger --policy 'checkpoint:blocks.*' --policy 'offload:blocks.*.moe'
    memledger compare tests/clients/train_stmoe.py -p 'checkpoint:experts.experts.*' -- --mode moe
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from st_moe_pytorch import MoE, SparseMoEBlock


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # (b, h, n, dh)
        return self.out(o.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, experts: int):
        super().__init__()
        self.attn = Attention(dim, heads)
        self.moe = SparseMoEBlock(MoE(dim, num_experts=experts, gating_top_n=2,
                                      capacity_factor_train=1.25, capacity_factor_eval=2.0),
                                  add_ff_before=False, add_ff_after=True)

    def forward(self, x):
        x = x + self.attn(x)
        x, aux, _balance, _z = self.moe(x)
        return x, aux


class MoETransformer(nn.Module):
    def __init__(self, vocab: int, dim: int, depth: int, heads: int, experts: int, seq: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, heads, experts) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx) + self.pos[: idx.shape[1]]
        aux_total = 0.0
        for block in self.blocks:
            x, aux = block(x)
            aux_total = aux_total + aux
        return self.head(self.norm(x)), aux_total


def layer_model(args):
    """One MoE layer (or block) as the model: (out, total_aux_loss, balance, z) per call."""
    kw = dict(num_experts=args.experts, gating_top_n=2, capacity_factor_train=1.25,
              capacity_factor_eval=2.0, balance_loss_coef=1e-2, router_z_loss_coef=1e-3)
    if args.mode == "coor":
        kw["differentiable_topk"] = True
    if args.mode == "modulelist":
        kw["gating_top_n"] = 3
        kw["threshold_train"] = kw["threshold_eval"] = 0.1
        kw["experts"] = nn.ModuleList([nn.Sequential(nn.Linear(args.dim, args.dim * 2), nn.GELU(),
                                                     nn.Linear(args.dim * 2, args.dim))
                                       for _ in range(args.experts)])
    moe = MoE(args.dim, **kw)
    if args.mode == "block":
        return SparseMoEBlock(moe, add_ff_before=True, add_ff_after=True)
    return moe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="moe", choices=["moe", "block", "sparse", "modulelist",
                                                      "noise", "coor", "transformer"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--amp", action="store_true", help="forward under CPU autocast (bf16)")
    ap.add_argument("--no-aux", action="store_true", help="train on the task loss alone")
    ap.add_argument("--aux-backward", action="store_true",
                    help="(layer modes) the aux loss by a backward of its own after the task's")
    ap.add_argument("--accum", type=int, default=1, help="(transformer) micro-batches a step")
    ap.add_argument("--eval-with-grad", action="store_true",
                    help="the validation forward without torch.no_grad() (a common slip)")
    args = ap.parse_args()
    if args.mode == "sparse":
        args.experts, args.batch, args.seq = max(args.experts, 16), 1, 8
    torch.manual_seed(0)

    if args.mode == "transformer":
        model = MoETransformer(args.vocab, args.dim, args.depth, args.heads, args.experts,
                               args.seq)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        data = torch.randint(0, args.vocab, (64, args.seq + 1))
        val = torch.randint(0, args.vocab, (args.batch, args.seq + 1))
        for step in range(args.steps):
            for micro in range(args.accum):
                batch = data[torch.randint(0, len(data), (args.batch,))]
                x, y = batch[:, :-1], batch[:, 1:]
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                    logits, aux = model(x)
                    loss = F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1)) + \
                        (0 if args.no_aux else aux)
                if micro == 0:
                    opt.zero_grad(set_to_none=True)
                (loss / args.accum).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if args.eval_every and (step + 1) % args.eval_every == 0:
                model.eval()
                with torch.set_grad_enabled(args.eval_with_grad):
                    vl, _ = model(val[:, :-1])
                    vloss = F.cross_entropy(vl.reshape(-1, args.vocab), val[:, 1:].reshape(-1))
                model.train()
                print(f"step {step}: val {vloss.item():.4f}")
            print(f"step {step}: loss {loss.item():.4f}")
        return

    model = layer_model(args)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    target = nn.Linear(args.dim, args.dim)   # a fixed random map to learn
    target.requires_grad_(False)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.seq, args.dim)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            out, aux, balance, z = model(x, noise_gates=args.mode == "noise")
            loss = F.mse_loss(out.float(), target(x).float()) + \
                (0 if args.no_aux or args.aux_backward else aux)
        opt.zero_grad()
        if args.aux_backward:   # the router's losses by a second pass through the same graph
            loss.backward(retain_graph=True)
            aux.backward()
            loss = loss + aux.detach()
        else:
            loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f} balance {balance.item():.4f} "
              f"z {z.item():.4f}")


if __name__ == "__main__":
    main()
