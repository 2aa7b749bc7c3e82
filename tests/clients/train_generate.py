"""Sample, then train on the samples: each step generates completions with transformers'
`generate` (sampling, a KV cache, stopped by EOS or by `max_new_tokens`) under `no_grad`,
then trains a tiny GPT-2 on them, as on-policy RL fine-tuning (GRPO, PPO, online DPO)
does. Built from a config, nothing downloaded.

    python tests/clients/train_generate.py --steps 3
    memledger trace --fake tests/clients/train_generate.py --steps 2 -- --steps 3

Under `--fake` the sampled tokens have no values, so "is any sequence unfinished" is known
only through its length half (Rule 3 of docs/fake.md): the fake run generates to
`--new-tokens`, the longest a real run can.
"""
import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

transformers.logging.set_verbosity_error()

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--new-tokens", type=int, default=8)
args = p.parse_args()

torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=64,
                 eos_token_id=3, pad_token_id=0)
model = GPT2LMHeadModel(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(args.steps):
    prompt = torch.randint(4, 64, (2, 6))
    model.eval()
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True,
                             max_new_tokens=args.new_tokens)
    model.train()
    loss = model(out, labels=out).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(step, tuple(out.shape), round(loss.item(), 4))
