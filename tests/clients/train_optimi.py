"""Training with torch-optimi (`import optimi`) and LOMO / AdaLomo (`import lomo_optim`), as
their READMEs write it: updates done during backward. A tiny transformer language model (an
embedding, `blocks.*` of `nn.TransformerEncoderLayer` with a causal mask, a `head`), built
from flags, seeded, nothing downloaded.

    python tests/clients/train_optimi.py --steps 3 --opt adamw --bf16 --release
    memledger trace tests/clients/train_optimi.py --steps 2 -o optimi.ledger -- --opt adamw
    memledger compare tests/clients/train_optimi.py --steps 2 -p 'checkpoint:blocks.*' \
        -- --opt lion --bf16 --release

optimi (`--opt adamw|adam|lion|stableadamw|adan|sgd|ranger|radam`):

- plain: `opt.zero_grad()`, `loss.backward()`, `opt.step()`; `--foreach` for the foreach
  implementation; `--bf16` puts the model in bfloat16 (`optimi.to_low_precision` style:
  `model.to(torch.bfloat16)`), where optimi keeps a Kahan compensation buffer per parameter
  (`kahan_sum` defaults to on for 16-bit parameters; `--no-kahan` turns it off).
- `--release`: gradient release: the optimizer is built with `gradient_release=True` and
  `optimi.prepare_for_gradient_release(model, opt)` registers a post-accumulate-grad hook on
  every parameter that calls `opt.step(param=p)` and `opt.zero_grad(param=p)` inside backward.
  The loop is `loss.backward()` alone; `--call-step` also calls `opt.step()` and
  `opt.zero_grad()` after it, as a training framework would (optimi: "harmless no-ops").
  `--ckpt`: the model checkpoints its own blocks (`torch.utils.checkpoint`, non-reentrant),
  as a fine-tune with gradient checkpointing on does.
- `--accum N` (with `--release`): optimizer accumulation: `opt.optimizer_accumulation =
  (i + 1) % N != 0` before each micro-batch's backward: the gradients accumulate into the
  optimizer's state, the parameters are updated on the N-th micro-batch.

lomo_optim (`--opt lomo|adalomo`): `Lomo(model, lr)` / `AdaLomo(model, lr)` register a hook
on every parameter that updates the parameters inside backward and frees their gradients;
the loop is `optimizer.fused_backward(loss, lr)` (with `--clip 1.0`: `optimizer.grad_norm(
loss)` first, as LOMO's trainer does: a backward over the same graph that keeps it, for the
gradients' norm); no `optimizer.step()`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

VOCAB, DIM, HEADS, FF = 64, 32, 2, 64
BATCH, SEQ_LEN = 4, 16


class LM(nn.Module):
    def __init__(self, depth: int, ckpt: bool = False) -> None:
        super().__init__()
        self.ckpt = ckpt
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(DIM, HEADS, FF, dropout=0.0, batch_first=True)
            for _ in range(depth))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], dtype=h.dtype)
        for block in self.blocks:
            if self.ckpt and self.training:
                h = checkpoint(block, h, mask, None, True, use_reentrant=False)
            else:
                h = block(h, src_mask=mask, is_causal=True)
        return self.head(self.norm(h))


def batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    seq = torch.randint(0, VOCAB, (BATCH, SEQ_LEN + 1), generator=gen)
    return seq[:, :-1], seq[:, 1:]


def lm_loss(model: LM, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1))


def optimi_loop(args, model: LM, gen: torch.Generator) -> None:
    import optimi

    cls = {"adamw": optimi.AdamW, "adam": optimi.Adam, "lion": optimi.Lion,
           "stableadamw": optimi.StableAdamW, "adan": optimi.Adan, "sgd": optimi.SGD,
           "ranger": optimi.Ranger, "radam": optimi.RAdam}[args.opt]
    kw = {"lr": 1e-3 if args.opt != "lion" else 1e-4, "foreach": args.foreach,
          "triton": False, "gradient_release": args.release}
    if args.no_kahan:
        kw["kahan_sum"] = False
    if args.opt == "sgd":
        kw["momentum"] = 0.9
    opt = cls(model.parameters(), **kw)
    if args.release:
        optimi.prepare_for_gradient_release(model, opt)
    micro = 0
    for step in range(args.steps):
        for _ in range(args.accum):
            tokens, targets = batch(gen)
            if args.release:
                if args.accum > 1:
                    opt.optimizer_accumulation = (micro + 1) % args.accum != 0
                micro += 1
                loss = lm_loss(model, tokens, targets)
                loss.backward()              # the update runs in here
                if args.call_step:
                    opt.step()
                    opt.zero_grad()
            else:
                loss = lm_loss(model, tokens, targets) / args.accum
                loss.backward()
        if not args.release:
            opt.step()
            opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


def lomo_loop(args, model: LM, gen: torch.Generator) -> None:
    from lomo_optim import AdaLomo, Lomo

    lr = 1e-3
    clip = {"clip_grad_norm": args.clip} if args.clip else {}
    opt = (Lomo if args.opt == "lomo" else AdaLomo)(model, lr=lr, **clip)
    for step in range(args.steps):
        tokens, targets = batch(gen)
        loss = lm_loss(model, tokens, targets)
        if args.clip:
            opt.grad_norm(loss)          # a backward that keeps the graph, for the norm
        opt.fused_backward(loss, lr)     # the update runs in here
        print(f"step {step}  loss {loss.item():.4f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--opt", default="adamw",
                   choices=["adamw", "adam", "lion", "stableadamw", "adan", "sgd", "ranger",
                            "radam", "lomo", "adalomo"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--bf16", action="store_true", help="bfloat16 parameters")
    p.add_argument("--no-kahan", action="store_true", help="kahan_sum=False")
    p.add_argument("--foreach", action="store_true")
    p.add_argument("--release", action="store_true", help="gradient release")
    p.add_argument("--call-step", action="store_true",
                   help="with --release: call opt.step() and opt.zero_grad() after backward")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--accum", type=int, default=1, help="micro-batches per step")
    p.add_argument("--ckpt", action="store_true",
                   help="checkpoint each block in the model's forward (torch.utils.checkpoint)")
    p.add_argument("--clip", type=float, default=0.0, help="LOMO: clip_grad_norm")
    args = p.parse_args()
    global BATCH, SEQ_LEN
    BATCH, SEQ_LEN = args.batch, args.seq
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = LM(args.depth, args.ckpt)
    if args.bf16:
        model = model.to(torch.bfloat16)
    model.train()
    if args.opt in ("lomo", "adalomo"):
        lomo_loop(args, model, gen)
    else:
        optimi_loop(args, model, gen)


if __name__ == "__main__":
    main()
