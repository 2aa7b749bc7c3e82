"""Two mixture-of-experts libraries trained as their READMEs use them.

`mixture-of-experts` (0.2.3, lucidrains' port of tensor2tensor's sparsely-gated MoE):
`MoE(dim, num_experts, ...)` returns `(out, aux_loss)`; the auxiliary load-balancing loss is
added to the task loss and backward runs on the sum. Its `Top2Gating` routes each token to
its top expert and, under `second_policy_train='random'` (the default), to its second one
with a probability drawn from the global generator in every forward; dispatch and combine
tensors are (batch, tokens, experts, capacity). `HeirarchicalMoE(dim, num_experts=(4, 4))`
gates twice.

`soft-moe-pytorch` (0.1.9, lucidrains' Soft MoE): `SoftMoE(dim, seq_len=..., num_experts=...)`
inside a transformer block in place of the feedforward (no auxiliary loss: every slot is a
soft mix of all tokens); `add_noise=True` adds gumbel noise to the dispatch logits;
`DynamicSlotsSoftMoE` makes its slot embeddings from the tokens.

Modes:
  moe        a small classifier: embedding, `blocks.*` of (attention, MoE) with residuals, a
             mean-pooled head; cross-entropy plus the blocks' aux losses; Adam
  hier       the same with `HeirarchicalMoE` (2 x 2 experts)
  soft       the same with `SoftMoE` as each block's feedforward, AdamW
  soft-noise `SoftMoE(..., add_noise=True)` in training
  dynamic    `DynamicSlotsSoftMoE` with a key padding mask (sequences padded to the experts)
  --policy P  `second_policy_train` of the MoE gates (random, all, none, threshold)
  --no-aux    train on the task loss alone (the aux losses returned and dropped)
  --dist      (under torchrun) join a gloo group first: `SoftMoE` asks `dist.is_initialized()`
              when built and then gathers every rank's slots and runs its share of experts

    python tests/clients/train_moe.py --mode moe --steps 3
    memledger trace tests/clients/train_moe.py --steps 2 -o moe.ledger -- --mode moe
    memledger predict moe.ledger --policy 'checkpoint:blocks.*.moe'
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x, mask=None):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        attn_mask = None if mask is None else mask[:, None, None, :]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out(o.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.mode = args.mode
        self.attn = Attention(args.dim, args.heads)
        self.norm = nn.LayerNorm(args.dim)
        if args.mode in ("moe", "hier"):
            from mixture_of_experts import HeirarchicalMoE, MoE

            kw = dict(second_policy_train=args.policy, loss_coef=1e-2,
                      capacity_factor_train=1.25)
            if args.mode == "moe":
                self.moe = MoE(args.dim, num_experts=args.experts, hidden_dim=args.dim * 2, **kw)
            else:
                self.moe = HeirarchicalMoE(args.dim, num_experts=(2, 2),
                                           hidden_dim=args.dim * 2, **kw)
        elif args.mode in ("soft", "soft-noise"):
            from soft_moe_pytorch import SoftMoE

            self.moe = SoftMoE(args.dim, seq_len=args.seq, num_experts=args.experts,
                               expert_mult=2, dropout=args.dropout, geglu=args.geglu,
                               use_layernorm=args.layernorm)
        else:
            from soft_moe_pytorch import DynamicSlotsSoftMoE

            self.moe = DynamicSlotsSoftMoE(args.dim, num_experts=args.experts, expert_mult=2,
                                           dropout=args.dropout, geglu=args.geglu)

    def forward(self, x, mask=None):
        x = x + self.attn(x, mask)
        h = self.norm(x)
        if self.mode in ("moe", "hier"):
            out, aux = self.moe(h)
        elif self.mode == "dynamic":
            out, aux = self.moe(h, mask=mask), x.new_zeros(())
        elif self.mode == "soft" and mask is not None:
            out, aux = self.moe(h, mask=mask), x.new_zeros(())
        else:
            out, aux = self.moe(h, add_noise=self.mode == "soft-noise" and self.training), \
                x.new_zeros(())
        return x + out, aux


class Classifier(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.emb = nn.Embedding(args.vocab, args.dim)
        self.blocks = nn.ModuleList([Block(args) for _ in range(args.depth)])
        self.head = nn.Linear(args.dim, args.classes)
        self.grad_ckpt = args.grad_ckpt

    def forward(self, idx, mask=None):
        x = self.emb(idx)
        aux_total = 0.0
        for block in self.blocks:
            if self.grad_ckpt and self.training:
                x, aux = checkpoint(block, x, mask, use_reentrant=self.grad_ckpt == "reentrant")
            else:
                x, aux = block(x, mask)
            aux_total = aux_total + aux
        if mask is None:
            pooled = x.mean(dim=1)
        else:
            m = mask.unsqueeze(-1).to(x.dtype)
            pooled = (x * m).sum(dim=1) / m.sum(dim=1)
        return self.head(pooled), aux_total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="moe",
                    choices=["moe", "hier", "soft", "soft-noise", "dynamic"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--policy", default="random", choices=["random", "all", "none"])
    ap.add_argument("--no-aux", action="store_true", help="train on the task loss alone")
    ap.add_argument("--dropout", type=float, default=0.0, help="(soft, dynamic) expert dropout")
    ap.add_argument("--geglu", action="store_true", help="(soft, dynamic) GEGLU experts")
    ap.add_argument("--layernorm", action="store_true", help="(soft) LayerNorm, not RMSNorm")
    ap.add_argument("--mask", action="store_true", help="(soft) a key padding mask")
    ap.add_argument("--grad-ckpt", choices=["reentrant", "nonreentrant"],
                    help="the script checkpoints each block itself (torch.utils.checkpoint)")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--aux-backward", action="store_true",
                    help="(moe, hier) `loss.backward(retain_graph=True)`, then `aux.backward()`")
    ap.add_argument("--amp", action="store_true", help="forward under CPU autocast (bf16)")
    ap.add_argument("--eval-every", type=int, default=0,
                    help="a validation batch under no_grad in eval mode every N steps")
    ap.add_argument("--log-aux", action="store_true",
                    help="sum the aux losses over the run for logging, tensors and all (a slip)")
    ap.add_argument("--dist", action="store_true",
                    help="join a gloo process group first (under torchrun): Soft MoE then "
                         "splits its experts across the ranks")
    args = ap.parse_args()
    if args.dist:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("gloo")
    torch.manual_seed(0)

    model = Classifier(args)
    if args.mode in ("moe", "hier"):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    data = torch.randint(0, args.vocab, (64, args.seq))
    labels = torch.randint(0, args.classes, (64,))
    lengths = torch.randint(args.seq // 2, args.seq + 1, (64,))
    aux_sum = 0.0
    model.train()
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        for micro in range(args.accum):
            i = torch.randint(0, len(data), (args.batch,))
            x, y = data[i], labels[i]
            mask = None
            if args.mode == "dynamic" or args.mask:
                mask = torch.arange(args.seq)[None, :] < lengths[i][:, None]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                logits, aux = model(x, mask)
                loss = F.cross_entropy(logits.float(), y)
            if args.log_aux:
                aux_sum = aux_sum + aux
            if args.aux_backward:   # the aux loss by a second pass through the same graph
                (loss / args.accum).backward(retain_graph=True)
                (aux / args.accum).backward()
                continue
            if not args.no_aux:
                loss = loss + aux
            (loss / args.accum).backward()
        opt.step()
        if args.eval_every and (step + 1) % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                vl, _ = model(data[:args.batch])
                vloss = F.cross_entropy(vl.float(), labels[:args.batch])
            model.train()
            print(f"step {step}: val {vloss.item():.4f}")
        print(f"step {step}: loss {loss.item():.4f} aux {aux.item():.4f}")
    if args.log_aux:
        print(f"mean aux {aux_sum.item() / args.steps:.4f}")


if __name__ == "__main__":
    main()
