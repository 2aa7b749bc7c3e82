"""Train any transformers language model built from its config by `model_type` (no download),
with the extras of a real loop: gradient clipping, a OneCycle schedule, an EMA copy.

    python tests/clients/train_auto.py --model qwen2 --steps 5
    python tests/clients/train_auto.py --model distilbert --clip 1 --sched --ema
    python tests/clients/train_auto.py --model roberta --grad-ckpt
    memledger trace tests/clients/train_auto.py --steps 2 -o q.ledger -- --model bloom

The sizes below are set on whichever of a config's names it has (`hidden_size`, `n_embd`,
`dim`, ...), everything else is the library's default; a causal LM where the type has one,
else a masked LM, trained on random tokens as their own labels, KV cache off.
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

transformers.logging.set_verbosity_error()


def build(model_type: str, layers: int, hidden: int, heads: int, vocab: int, seq: int):
    cfg = AutoConfig.for_model(model_type)
    sizes = dict(num_hidden_layers=layers, n_layer=layers, n_layers=layers,
                 hidden_size=hidden, n_embd=hidden, dim=hidden,
                 num_attention_heads=heads, n_head=heads, n_heads=heads,
                 num_key_value_heads=max(1, heads // 2),
                 intermediate_size=2 * hidden, hidden_dim=2 * hidden,
                 vocab_size=vocab, max_position_embeddings=seq, n_positions=seq,
                 use_cache=False)
    for name, value in sizes.items():
        if hasattr(cfg, name):
            setattr(cfg, name, value)
    if "roberta" in model_type:   # positions count from past the padding index
        cfg.max_position_embeddings = seq + cfg.pad_token_id + 1
    if getattr(cfg, "head_dim", None) is not None:
        cfg.head_dim = hidden // heads
    try:
        return AutoModelForCausalLM.from_config(cfg)
    except ValueError:   # no causal LM for this type (BERT-like)
        return AutoModelForMaskedLM.from_config(cfg)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2", help="a transformers model_type")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--clip", type=float, default=0.0, help="clip_grad_norm_ to this")
    p.add_argument("--sched", action="store_true", help="OneCycleLR stepped every step")
    p.add_argument("--ema", action="store_true", help="an EMA copy updated every step")
    p.add_argument("--grad-ckpt", action="store_true",
                   help="model.gradient_checkpointing_enable(): the library's own checkpoint")
    a = p.parse_args()
    torch.manual_seed(0)
    model = build(a.model, a.layers, a.hidden, a.heads, a.vocab, a.seq)
    if a.grad_ckpt:
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=a.steps + 1) \
        if a.sched else None
    ema = torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.99)) if a.ema else None
    gen = torch.Generator().manual_seed(1)
    for step in range(a.steps):
        ids = torch.randint(0, a.vocab, (a.batch_size, a.seq), generator=gen)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if a.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        if sched is not None:
            sched.step()
        if ema is not None:
            ema.update_parameters(model)
        opt.zero_grad(set_to_none=True)
        print(f"step {step:4d}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
