"""transformers' Trainer as people configure it: gradient accumulation 2, max_grad_norm,
bf16 (autocast on CPU), a warm-up schedule from lr 0, weight decay, padded labels (-100)
with a different number of valid tokens per micro-batch; a tiny GPT-2 from a config.

    python hf_trainer.py [cosine|linear]

No finding: the Trainer's first step runs at lr 0 (its warm-up) with its fused AdamW,
which once read as no_update.
"""
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

SCHED = sys.argv[1] if len(sys.argv) > 1 else "cosine"
torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=101, n_positions=32,
                 bos_token_id=0, eos_token_id=0)


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        ids = torch.randint(1, 101, (16,), generator=torch.Generator().manual_seed(i))
        labels = ids.clone()
        labels[8 + i % 8:] = -100
        return {"input_ids": ids, "labels": labels}


args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=2,
                         gradient_accumulation_steps=2, max_grad_norm=1.0, bf16=True,
                         use_cpu=True, lr_scheduler_type=SCHED, warmup_steps=2, max_steps=6,
                         weight_decay=0.01, report_to=[], save_strategy="no",
                         logging_steps=1, dataloader_num_workers=0, disable_tqdm=True)
Trainer(model=GPT2LMHeadModel(cfg), args=args, train_dataset=Data()).train()
