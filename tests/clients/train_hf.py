"""Fine-tune a tiny transformers model built from its config (no download), as a user would.

    python tests/clients/train_hf.py --model gpt2 --steps 5
    memledger trace tests/clients/train_hf.py --steps 2 -o gpt2.ledger -- --model gpt2
    memledger predict gpt2.ledger --policy 'checkpoint:transformer.h.*'
    python tests/clients/train_hf.py --model bert --autocast bf16 --accum 2 --clip 1
    python tests/clients/train_hf.py --model gpt2 --grad-ckpt
    memledger doctor --steps-by forward tests/clients/train_hf.py -- --steps 0 --eval 4

`--eval N`: after training, an evaluation loop over N batches (`model.eval()`, under
`torch.no_grad()`, the mean loss read with `.item()`). `--eval-bug` plants a classic bug in
it, the loop then without `no_grad`: `sum-loss` (`total = total + out.loss`: every batch's
graph stays reachable from `total`), `keep-logits` (`logits.append(out.logits)`: each
batch's logits and the graph behind them kept).

Models (every setting left at the library's default but the sizes): `gpt2` (causal LM,
dropout 0.1, KV cache on), `llama` (causal LM, RoPE, RMSNorm, SwiGLU, KV cache on), `bert`
(masked LM, 15 % of positions labelled), `albert` (one layer shared by all), `distilbert`
(masked LM, post-LN). Tokens are random, from their own generator.
"""

import argparse
import contextlib
import os
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import torch
import transformers
from transformers import (
    AlbertConfig,
    AlbertForMaskedLM,
    BertConfig,
    BertForMaskedLM,
    DistilBertConfig,
    DistilBertForMaskedLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
)

transformers.logging.set_verbosity_error()   # token ids past a tiny vocab: not our concern


def build(name: str, layers: int, hidden: int, heads: int, vocab: int, seq: int,
          intermediate: int | None = None):
    if name == "gpt2":
        cfg = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=vocab,
                         n_positions=seq)
        return GPT2LMHeadModel(cfg)
    if name == "llama":
        cfg = LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                          num_key_value_heads=heads,
                          intermediate_size=intermediate or 2 * hidden,
                          vocab_size=vocab, max_position_embeddings=seq)
        return LlamaForCausalLM(cfg)
    if name == "albert":   # one layer's weights shared by every layer: called `layers` times
        cfg = AlbertConfig(num_hidden_layers=layers, hidden_size=hidden, embedding_size=hidden,
                           num_attention_heads=heads, intermediate_size=4 * hidden,
                           vocab_size=vocab, max_position_embeddings=seq)
        return AlbertForMaskedLM(cfg)
    if name == "bert":
        cfg = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                         intermediate_size=4 * hidden, vocab_size=vocab,
                         max_position_embeddings=seq)
        return BertForMaskedLM(cfg)
    if name == "distilbert":   # post-LN: each layer ends in a LayerNorm (unlike GPT-2's add)
        cfg = DistilBertConfig(n_layers=layers, dim=hidden, n_heads=heads, hidden_dim=4 * hidden,
                               vocab_size=vocab, max_position_embeddings=seq)
        return DistilBertForMaskedLM(cfg)
    raise SystemExit(f"unknown --model {name!r}: gpt2, llama, bert, albert or distilbert")


def batch(name: str, gen: torch.Generator, bsz: int, seq: int, vocab: int) -> dict:
    ids = torch.randint(0, vocab, (bsz, seq), generator=gen)
    if name not in ("bert", "albert", "distilbert"):
        return {"input_ids": ids, "labels": ids}
    labels = torch.where(torch.rand(bsz, seq, generator=gen) < 0.15, ids, -100)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2", choices=["gpt2", "llama", "bert", "albert",
                                                             "distilbert"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, help="llama's MLP width (default 2 x hidden)")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--no-cache", action="store_true",
                   help="use_cache=False (the library's default is True, even in training)")
    p.add_argument("--autocast", choices=["bf16"], help="forward under torch.autocast")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--clip", type=float, help="clip the gradients' norm to this")
    p.add_argument("--grad-ckpt", action="store_true",
                   help="model.gradient_checkpointing_enable(): the library's own checkpoint")
    p.add_argument("--device", default="cpu", help="cpu, cuda, ...")
    p.add_argument("--loss-only", action="store_true",
                   help="keep only the loss of each forward (its KV cache goes before backward)")
    p.add_argument("--eval", type=int, default=0, help="evaluation batches after training")
    p.add_argument("--eval-bug", choices=["sum-loss", "keep-logits"],
                   help="plant a bug in the evaluation loop (then without no_grad)")
    args = p.parse_args()

    torch.manual_seed(0)
    model = build(args.model, args.layers, args.hidden, args.heads, args.vocab, args.seq,
                  args.intermediate).to(args.device)
    if args.no_cache:
        model.config.use_cache = False
    if args.grad_ckpt:
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1234)
    amp = torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16, enabled=args.autocast == "bf16")
    for step in range(args.steps):
        for _ in range(args.accum):
            with amp:
                inputs = batch(args.model, gen, args.batch_size, args.seq, args.vocab)
                out = model(**{k: v.to(args.device) for k, v in inputs.items()})
                if args.loss_only:   # the output and its KV cache go before backward
                    out = SimpleNamespace(loss=out.loss)
            (out.loss / args.accum).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {out.loss.item():.4f}")
    if args.eval:
        evaluate(args, model, gen)


def evaluate(args, model, gen: torch.Generator) -> None:
    model.eval()
    total, logits = 0.0, []
    with contextlib.nullcontext() if args.eval_bug else torch.no_grad():
        for _ in range(args.eval):
            inputs = batch(args.model, gen, args.batch_size, args.seq, args.vocab)
            out = model(**{k: v.to(args.device) for k, v in inputs.items()})
            if args.eval_bug == "sum-loss":
                total = total + out.loss
            else:
                total += out.loss.item()
            if args.eval_bug == "keep-logits":
                logits.append(out.logits)
    print(f"eval loss {float(total) / args.eval:.4f}")


if __name__ == "__main__":
    main()
