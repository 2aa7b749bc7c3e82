"""A tiny GPT-2 built from config (no download) whose weights are updated by hand: no torch
optimizer, so memledger counts steps by forward passes.

    memledger trace tests/clients/train_by_hand.py --steps-by forward --steps 2 -o h.ledger
    memledger predict h.ledger -p 'checkpoint:transformer.h.*'
    memledger measure tests/clients/train_by_hand.py --steps-by forward --steps 2 \
        --time-steps 1 -p 'checkpoint:transformer.h.*'

`--lora`: peft's LoRA on the attention's c_attn, only the adapters updated (the blocks are
then `base_model.model.transformer.h.*`).
"""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--lora", action="store_true")
p.add_argument("--steps", type=int, default=6)
args = p.parse_args()
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=64, n_head=4, vocab_size=256,
                                   n_positions=64, bos_token_id=0, eos_token_id=0))
if args.lora:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, target_modules=["c_attn"],
                                             fan_in_fan_out=True))
trainable = [q for q in model.parameters() if q.requires_grad]
for _ in range(args.steps):
    ids = torch.randint(0, 256, (4, 32))
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    with torch.no_grad():   # plain SGD, written out
        for q in trainable:
            q -= 1e-3 * q.grad
            q.grad = None
