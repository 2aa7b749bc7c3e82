"""Fine-tune a tiny GPT-2 with transformers' own `Trainer`, as most fine-tuning scripts do.

    python tests/clients/train_hf_trainer.py --steps 4
    memledger trace tests/clients/train_hf_trainer.py --steps 2 -o trainer.ledger -- --steps 4

The loop is the library's (accelerate's wrapped optimizer, its own zero_grad and
scheduler); the model is built from a config and the data set is random tokens, so nothing
is downloaded. `--grad-ckpt` sets TrainingArguments(gradient_checkpointing=True).

A run resumed from a checkpoint, as long fine-tunes restart:

    python tests/clients/train_hf_trainer.py --steps 2 --save DIR      # writes DIR/checkpoint-2
    memledger trace tests/clients/train_hf_trainer.py --steps 2 -- --steps 4 --resume DIR

`--resume` trains on from the checkpoint's model (safetensors), optimizer state
(`torch.load`), scheduler and RNG states, to `--steps` in all.
"""

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

transformers.logging.set_verbosity_error()


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        self.n, self.seq, self.vocab = n, seq, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, self.vocab, (self.seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--grad-ckpt", action="store_true")
    p.add_argument("--save", default="", help="write a checkpoint at the last step here")
    p.add_argument("--resume", default="", help="resume from the last checkpoint here")
    args = p.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=args.layers, n_embd=args.hidden, n_head=2,
                                       vocab_size=256, n_positions=args.seq))
    with tempfile.TemporaryDirectory(prefix="trainer-") as tmp:
        out = args.save or args.resume or tmp
        targs = TrainingArguments(output_dir=out, max_steps=args.steps,
                                  per_device_train_batch_size=args.batch_size,
                                  logging_steps=1_000, report_to=[],
                                  save_strategy="steps" if args.save else "no",
                                  save_steps=args.steps, use_cpu=True,
                                  gradient_checkpointing=args.grad_ckpt,
                                  dataloader_num_workers=0, disable_tqdm=True)
        Trainer(model=model, args=targs, train_dataset=RandomTokens(64, args.seq, 256)).train(
            resume_from_checkpoint=True if args.resume else None)


if __name__ == "__main__":
    main()
