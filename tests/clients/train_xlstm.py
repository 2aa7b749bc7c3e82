"""xLSTM (NX-AI's `xlstm`) as its README and experiments/main.py train it: an
`xLSTMLMModel` built from its config dataclasses (mLSTM blocks with an sLSTM block among
them), `model.reset_parameters()`, AdamW over the model's own weight-decay groups
(`_create_weight_decay_optim_groups`), a linear-warmup cosine schedule, cross-entropy on
the logits, `zero_grad()` before `backward()` as main.py has it. Seeded, tiny, nothing
downloaded; the pure-PyTorch backends (the mLSTM's parallel stabilized form, the sLSTM's
"vanilla" loop over time steps), which run on CPU.

    python tests/clients/train_xlstm.py --steps 3
    memledger trace tests/clients/train_xlstm.py --steps 2 -o xlstm.ledger
    memledger compare tests/clients/train_xlstm.py --steps 2 \
        -p 'checkpoint:xlstm_block_stack.blocks.*'

Modes (`--mode`):

- `lm`: the language model (`xLSTMLMModel`), `--slstm-at` the sLSTM blocks' places.
- `stack`: an `xLSTMBlockStack` alone on embeddings, as the README's first example calls it
  (`xlstm_stack(x)`), regressed onto a target.
- `generate`: no training; greedy decoding through `model.step` under no_grad, `--steps`
  prompts (trace it with `--steps-by forward`: a step per token).

- `large`: the xLSTM-7B architecture (`xlstm.xlstm_large`'s `xLSTMLarge`) at toy size, on
  mlstm_kernels' native chunkwise kernels (`--kernel chunkwise--native_autograd` or
  `chunkwise--native_custbw`), trained as `lm` is (AdamW over `model.parameters()`).
  `return_last_states=True`: 2.0.6's layer unpacks the kernel's output as an (h, state)
  pair, and without states it split `h` along the batch instead.
- `large-generate`: `xLSTMLarge.generate` under no_grad (its `forward` called as a
  function, once per token), `--steps` prompts.

`--group-order set` keeps xlstm's weight-decay groups in the order it returns them (a
set's, which varies from process to process: see `main`).
"""

import argparse
import math

import torch
import torch.nn.functional as F

from xlstm import (FeedForwardConfig, mLSTMBlockConfig, mLSTMLayerConfig, sLSTMBlockConfig,
                   sLSTMLayerConfig, xLSTMBlockStack, xLSTMBlockStackConfig, xLSTMLMModel,
                   xLSTMLMModelConfig)


def config(cls, args, **extra):
    slstm_at = [int(i) for i in args.slstm_at.split(",") if i != ""]
    return cls(
        mlstm_block=mLSTMBlockConfig(mlstm=mLSTMLayerConfig(
            conv1d_kernel_size=4, qkv_proj_blocksize=4, num_heads=args.heads)),
        slstm_block=sLSTMBlockConfig(
            slstm=sLSTMLayerConfig(backend="vanilla", num_heads=args.heads,
                                   conv1d_kernel_size=4, bias_init="powerlaw_blockdependent"),
            feedforward=FeedForwardConfig(proj_factor=1.3, act_fn="gelu")),
        context_length=args.context or args.seq_len, num_blocks=args.blocks, embedding_dim=args.dim,
        slstm_at=slstm_at, dropout=args.dropout, **extra)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="lm",
                   choices=["lm", "stack", "generate", "large", "large-generate"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--slstm-at", default="1")
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--context", type=int, default=0,
                   help="the config's context_length (default: --seq-len); longer, the mLSTM "
                   "makes its causal mask per call instead of reading its buffer")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--tie", action="store_true")
    p.add_argument("--new-tokens", type=int, default=4)
    p.add_argument("--kernel", default="chunkwise--native_autograd",
                   help="`--mode large`: xLSTMLargeConfig's chunkwise_kernel (a native one)")
    p.add_argument("--group-order", default="names", choices=["names", "set"],
                   help="the weight-decay groups' order: by parameter name, or xlstm's own "
                   "(a set's: it varies from process to process)")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--weights", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--amp", action="store_true", help="bf16 autocast, as main.py's "
                   "enable_mixed_precision")
    args = p.parse_args()
    torch.manual_seed(0)
    if args.mode in ("large", "large-generate"):
        from xlstm.xlstm_large.model import xLSTMLarge, xLSTMLargeConfig

        model = xLSTMLarge(xLSTMLargeConfig(
            embedding_dim=args.dim, num_heads=args.heads, num_blocks=args.blocks,
            vocab_size=args.vocab, chunkwise_kernel=args.kernel,
            sequence_kernel="native_sequence__native", step_kernel="native",
            mode="train" if args.mode == "large" else "inference",
            chunk_size=4, autocast_kernel_dtype="float32", return_last_states=True))
    elif args.mode in ("lm", "generate"):
        model = xLSTMLMModel(config(xLSTMLMModelConfig, args, vocab_size=args.vocab,
                                    tie_weights=args.tie))
    else:
        model = xLSTMBlockStack(config(xLSTMBlockStackConfig, args))
    if not args.mode.startswith("large"):
        model.reset_parameters()
    model = model.to(dtype=getattr(torch, args.weights))
    if args.mode == "generate":
        return generate(model, args)
    if args.mode == "large-generate":   # xLSTMLarge's own `generate` (its `forward`, called
        model.eval()                     # as a function, once per token)
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for _ in range(args.steps):
                prompt = torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=gen)
                tokens, _ = model.generate(prompt, max_length=args.new_tokens)
                print("generated", tokens.tolist())
        return
    if args.mode == "lm":
        decay, no_decay = model._create_weight_decay_optim_groups()
        if args.group_order == "names":
            # xlstm builds each group as a tuple of a set of parameters: its order follows
            # their addresses, which differ from process to process, and so does the
            # optimizer phase's peak (AdamW's `denom` of one parameter is still held while
            # the next one's is made): measured 180,576, 182,368 or 188,512 B under
            # `offload:xlstm_block_stack.blocks.1` from one run to the next. Ordered by name
            # here, every run steps the parameters in one order.
            name = {id(p): n for n, p in model.named_parameters()}
            decay, no_decay = (sorted(g, key=lambda p: name[id(p)]) for g in (decay, no_decay))
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    warmup, total = 2, max(args.steps, 3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / warmup if s < warmup
                                              else 0.5 * (1 + math.cos(math.pi * s / total)))
    gen = torch.Generator().manual_seed(0)
    model.train()
    for step in range(args.steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            if args.mode in ("lm", "large"):
                seq = torch.randint(0, args.vocab, (args.batch, args.seq_len + 1),
                                    generator=gen)
                inputs, labels = seq[:, :-1], seq[:, 1:]
                outputs = model(inputs)
                if args.mode == "large":   # (logits, the blocks' last states): 2.0.6's
                    outputs = outputs[0]   # layer unpacks the kernel's output as a pair
                loss = F.cross_entropy(outputs.view(-1, args.vocab), labels.reshape(-1),
                                       ignore_index=-1)
            else:
                x = torch.randn(args.batch, args.seq_len, args.dim, generator=gen,
                                dtype=getattr(torch, args.weights))
                loss = F.mse_loss(model(x), x.flip(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        print(f"step {step}  loss {loss.item():.4f}")


@torch.no_grad()
def generate(model, args) -> None:
    """Greedy decoding a token at a time through the recurrent `model.step` (the states
    handed back and in), the prompt fed token by token first."""
    model.eval()
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=gen)
    for _ in range(args.steps):
        state = None
        for t in range(args.seq_len):   # the prompt, token by token, to build the state
            logits, state = model.step(prompt[:, t:t + 1], state=state)
        tok = logits[:, -1:].argmax(-1)
        out = [tok]
        for _ in range(args.new_tokens - 1):
            logits, state = model.step(tok, state=state)
            tok = logits[:, -1:].argmax(-1)
            out.append(tok)
        print("generated", torch.cat(out, 1).tolist())


if __name__ == "__main__":
    main()
