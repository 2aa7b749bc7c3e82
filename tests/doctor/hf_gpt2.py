"""A transformers GPT-2 training loop, tiny and built from a config (no downloads):
padding labelled -100, AdamW with weight decay, a linear warm-up schedule, dropout on."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup

torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=101, n_positions=32,
                 bos_token_id=0, eos_token_id=0)
model = GPT2LMHeadModel(cfg)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=10)
for step in range(3):
    ids = torch.randint(0, 101, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0                                   # the second row is padded
    labels = ids.masked_fill(mask == 0, -100)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad()
