"""accelerate's own loop, saved and resumed with its state functions.

    python tests/clients/train_accelerate.py --steps 4 --save DIR       # state saved at the end
    python tests/clients/train_accelerate.py --steps 4 --resume DIR     # load_state, then on
    memledger trace tests/clients/train_accelerate.py --steps 3 -- --resume DIR

A small transformer encoder classifier prepared by `Accelerator(gradient_accumulation_steps=
2, mixed_precision=...)` with AdamW, a warm-up scheduler and a DataLoader; each optimizer
step takes two micro-batches under `accelerator.accumulate`, `accelerator.backward`,
`accelerator.clip_grad_norm_` on the step that syncs. `--save DIR` writes
`accelerator.save_state(DIR)` (model as safetensors, optimizer, scheduler, sampler and RNG
states) after the last step; `--resume DIR` calls `accelerator.load_state(DIR)` before the
first and skips the batches already seen (`skip_first_batches`), as accelerate's examples do.
"""
import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--save", default="")
p.add_argument("--resume", default="")
p.add_argument("--precision", default="no", choices=["no", "bf16"])
p.add_argument("--width", type=int, default=64)
ARGS = p.parse_args()

set_seed(0)


class Classifier(nn.Module):
    def __init__(self, vocab: int = 100, width: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(
            width, 4, 2 * width, dropout=0.0, batch_first=True) for _ in range(layers))
        self.head = nn.Linear(width, 4)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(1))


ids = torch.randint(0, 100, (64, 16), generator=torch.Generator().manual_seed(1))
labels = torch.randint(0, 4, (64,), generator=torch.Generator().manual_seed(2))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids, labels),
                                     batch_size=4, shuffle=True)
accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2,
                          mixed_precision=ARGS.precision)
model = Classifier(width=ARGS.width)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
done = 0
if ARGS.resume:
    accelerator.load_state(ARGS.resume)
    done = int(open(f"{ARGS.resume}/steps.txt").read())
batches = loader
if done:   # the micro-batches the saved run consumed in this epoch
    batches = accelerator.skip_first_batches(loader, 2 * done % len(loader))
steps = 0
while steps < ARGS.steps:
    for x, y in batches:
        with accelerator.accumulate(model):
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
        if accelerator.sync_gradients:
            steps += 1
            if steps == ARGS.steps:
                break
    batches = loader
if ARGS.save:
    accelerator.save_state(ARGS.save)
    with open(f"{ARGS.save}/steps.txt", "w") as f:
        f.write(str(done + steps))
