"""LoRA fine-tune of a tiny GPT-2 with peft (built from its config, no download).

    python tests/clients/train_lora.py --steps 5
    memledger trace tests/clients/train_lora.py --steps 2 -o lora.ledger
    memledger predict lora.ledger --policy 'checkpoint:base_model.model.transformer.h.*'

Only the adapters train (rank --rank on `c_attn`, peft's defaults otherwise); the base
model is frozen, so gradients and AdamW state exist for the adapters alone.
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

transformers.logging.set_verbosity_error()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--no-cache", action="store_true",
                   help="use_cache=False (the library's default is True, even in training)")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--grad-ckpt", action="store_true",
                   help="the usual peft recipe: the base model's gradient checkpointing, with "
                        "enable_input_require_grads()")
    args = p.parse_args()

    torch.manual_seed(0)
    base = GPT2LMHeadModel(GPT2Config(n_layer=args.layers, n_embd=args.hidden,
                                      n_head=args.heads, vocab_size=args.vocab,
                                      n_positions=args.seq, use_cache=not args.no_cache))
    if args.grad_ckpt:
        base.gradient_checkpointing_enable()
        base.enable_input_require_grads()
    model = get_peft_model(base, LoraConfig(r=args.rank, lora_alpha=16, lora_dropout=0.05,
                                            target_modules=["c_attn"], task_type="CAUSAL_LM"))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    gen = torch.Generator().manual_seed(1234)
    for step in range(args.steps):
        ids = torch.randint(0, args.vocab, (args.batch_size, args.seq), generator=gen)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {out.loss.item():.4f}")


if __name__ == "__main__":
    main()
