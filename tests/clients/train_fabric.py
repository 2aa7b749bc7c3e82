"""A tiny GPT fine-tuned in a loop of its own under Lightning Fabric, the way litgpt's
fine-tuning scripts are written.

    python tests/clients/train_fabric.py --precision bf16-mixed --accum 2 --clip
    memledger trace tests/clients/train_fabric.py --steps 3 -o fab.ledger -- --precision bf16-true

`Fabric(accelerator="cpu", devices=1, precision=...)`, `fabric.launch()`, `fabric.setup(model,
optimizer)` (the model is then called through `_FabricModule`, which holds it as
`_forward_module`), `fabric.setup_dataloaders`, `fabric.backward(loss)`, and an optimizer step
every `--accum` micro-batches, the others under `fabric.no_backward_sync(model,
enabled=is_accumulating)`. `--steps` counts optimizer steps, as litgpt's `max_steps` does.

- `--precision`: `32-true`, `bf16-mixed` (CPU autocast around the forward, through
  `_FabricModule`'s forward), `bf16-true` (the weights converted to bf16 by `fabric.setup`;
  under `--init-module` made in bf16 from the start).
- `--clip`: `fabric.clip_gradients(model, optimizer, max_norm=1.0)` before each step.
- `--init-module`: the model made under `fabric.init_module(empty_init=True)` (no weight
  initialisation: the values are whatever memory held, so the script then loads a seeded
  state dict into it, as litgpt loads a checkpoint into an empty model).
- `--save DIR`: `fabric.save(DIR/state.pt, {"model", "optimizer", "step"})` when the loop
  ends; `--resume DIR`: `fabric.load` it before the loop and go on from its step, to
  `--steps` optimizer steps in all.
- `--save-every K` (with `--save`): `fabric.save` every K optimizer steps too, mid-run, as
  litgpt's `save_interval`; `--eval-every K`: validate on 2 batches every K optimizer steps
  (litgpt's `validate`: `model.eval()`, `torch.no_grad()`, back to `model.train()`).
- `--lora R`: litgpt's LoRA on each qkv projection (rank R), every other weight frozen,
  AdamW over the LoRA weights alone.
- `--autocast`: the loss computed under an explicit `fabric.autocast()` too (litgpt's
  chunked loss does this outside the model).

`--bug` plants a mistake for `memledger doctor`: `no-zero` never zeroes the gradients,
`retain` keeps every micro-batch's loss (and its graph) in a list, `no-train` leaves the
model in eval mode after the first validation (with `--eval-every` and `--dropout`).

The model is `transformer.h.*` of pre-LN blocks (causal self-attention as one qkv projection,
a GELU MLP) with token and position embeddings and an untied `lm_head`, litgpt's names. The
data are random tokens; nothing is downloaded.
"""

import argparse
import math
import os
import warnings

import torch
import torch.nn.functional as F
from torch import nn


class LoRALinear(nn.Linear):
    """litgpt's `LoRALinear`: the pretrained weight frozen, a low-rank update beside it
    (`lora_A` random, `lora_B` zero at the start) scaled by alpha / r."""

    def __init__(self, width: int, out: int, r: int, alpha: int = 16) -> None:
        super().__init__(width, out)
        self.lora_A = nn.Parameter(torch.empty(r, width))
        self.lora_B = nn.Parameter(torch.zeros(out, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scaling = alpha / r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, lora: int = 0) -> None:
        super().__init__()
        self.heads = heads
        self.attn = LoRALinear(width, 3 * width, lora) if lora else nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.attn(x).split(c, dim=-1)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, 4 * width)
        self.proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float = 0.0, lora: int = 0) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.norm_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, lora)
        self.norm_2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm_1(x))
        return x + self.drop(self.mlp(self.norm_2(x)))


class GPT(nn.Module):
    def __init__(self, vocab: int, width: int, depth: int, heads: int, seq: int,
                 dropout: float = 0.0, lora: int = 0) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, width),
            wpe=nn.Embedding(seq, width),
            h=nn.ModuleList(Block(width, heads, dropout, lora) for _ in range(depth)),
            ln_f=nn.LayerNorm(width)))
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        self.n, self.seq, self.vocab = n, seq, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, self.vocab, (self.seq + 1,), generator=g)
        return ids[:-1], ids[1:]


@torch.no_grad()
def validate(fabric, model: nn.Module, val, bug: str = "") -> torch.Tensor:
    """litgpt's `validate`: eval mode, no_grad, the mean loss, back to train mode."""
    model.eval()
    losses = torch.zeros(len(val))
    for k, (ids, labels) in enumerate(val):
        logits = model(ids)
        losses[k] = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
    if bug != "no-train":
        model.train()
    return losses.mean()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4, help="optimizer steps (litgpt's max_steps)")
    p.add_argument("--precision", choices=["32-true", "bf16-mixed", "bf16-true"],
                   default="32-true")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--clip", action="store_true", help="fabric.clip_gradients(max_norm=1.0)")
    p.add_argument("--autocast", action="store_true", help="the loss under fabric.autocast()")
    p.add_argument("--init-module", action="store_true",
                   help="make the model under fabric.init_module(empty_init=True)")
    p.add_argument("--save", default="", help="fabric.save the state into this folder")
    p.add_argument("--resume", default="", help="fabric.load the state from this folder")
    p.add_argument("--save-every", type=int, default=0,
                   help="with --save: also fabric.save every this many optimizer steps")
    p.add_argument("--eval-every", type=int, default=0,
                   help="validate on 2 batches every this many optimizer steps")
    p.add_argument("--lora", type=int, default=0,
                   help="rank of LoRA on the qkv projections; everything else frozen")
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--strategy", default="auto", help="with --devices 2: ddp, ddp_spawn")
    p.add_argument("--compile", default="", help="torch.compile the model with this backend "
                   "(inductor, aot_eager, eager) before fabric.setup, as litgpt's pretraining")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout in the blocks")
    p.add_argument("--bug", choices=["", "no-zero", "retain", "no-train"], default="",
                   help="a planted mistake for `memledger doctor`")
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--micro-batch-size", type=int, default=4)
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=args.devices, strategy=args.strategy,
                    precision=args.precision)
    fabric.launch()
    fabric.seed_everything(0, verbose=False)
    dims = (args.vocab, args.width, args.depth, args.heads, args.seq, args.dropout,
            args.lora)
    if args.init_module:
        with fabric.init_module(empty_init=True):
            model = GPT(*dims)
        torch.manual_seed(0)
        model.load_state_dict(GPT(*dims).state_dict())   # litgpt: load the checkpoint
    else:
        model = GPT(*dims)
    if args.compile:
        model = torch.compile(model, backend=args.compile)
    if args.lora:   # litgpt's mark_only_lora_as_trainable
        for name, param in model.named_parameters():
            param.requires_grad = "lora_" in name
    trainable = [param for param in model.parameters() if param.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3, weight_decay=0.02)
    model, optimizer = fabric.setup(model, optimizer)
    data = torch.utils.data.DataLoader(RandomTokens(256, args.seq, args.vocab),
                                       batch_size=args.micro_batch_size, shuffle=False)
    val = torch.utils.data.DataLoader(RandomTokens(8, args.seq, args.vocab),
                                      batch_size=args.micro_batch_size)
    data, val = fabric.setup_dataloaders(data, val)

    state = {"model": model, "optimizer": optimizer, "step": 0}
    if args.resume:
        fabric.load(os.path.join(args.resume, "state.pt"), state)

    model.train()
    micro, losses = 0, []
    for ids, labels in data:
        if state["step"] >= args.steps:
            break
        micro += 1
        is_accumulating = micro % args.accum != 0
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            logits = model(ids)
            if args.autocast:
                with fabric.autocast():
                    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
            else:
                loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
            fabric.backward(loss / args.accum)
            if args.bug == "retain":
                losses.append(loss)
        if not is_accumulating:
            if args.clip:
                fabric.clip_gradients(model, optimizer, max_norm=1.0)
            optimizer.step()
            if args.bug != "no-zero":
                optimizer.zero_grad()
            state["step"] += 1
            if args.save and args.save_every and state["step"] % args.save_every == 0:
                os.makedirs(args.save, exist_ok=True)
                fabric.save(os.path.join(args.save, "state.pt"), state)
            if args.eval_every and state["step"] % args.eval_every == 0:
                validate(fabric, model, val, args.bug)

    if args.save:
        os.makedirs(args.save, exist_ok=True)
        fabric.save(os.path.join(args.save, "state.pt"), state)


if __name__ == "__main__":
    main()
