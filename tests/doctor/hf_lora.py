"""A peft LoRA fine-tune of a tiny GPT-2 built from a config (no downloads): the base is
frozen, only the adapters train, the optimizer gets the trainable parameters only."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=101, n_positions=32,
                 bos_token_id=0, eos_token_id=0)
model = get_peft_model(GPT2LMHeadModel(cfg), LoraConfig(
    r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.1, fan_in_fan_out=True))
model.train()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for step in range(3):
    ids = torch.randint(0, 101, (2, 16))
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad()
