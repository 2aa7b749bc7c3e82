"""Planted bugs (check 4): gradient accumulation over K=2 micro-batches of padded tokens.

    --bug tokens   each micro-batch's loss is a mean over its own valid tokens (30, then 10):
                   a token of the second weighs 3x one of the first (transformers#34191)
    --bug nodiv    the loss is not divided by K
    --bug msenodiv the same with a regression loss (mse_loss on the logits)
    --bug nonenodiv the loss not divided by K, a regression loss called with
                   reduction='none' and reduced by the script (`.mean()`: per-sample losses;
                   hl-gauss-pytorch's HLGaussLoss): Note [A loss reduced after the call]
    --bug noneshort  --bug short's loop on that reduction='none' loss, divided by K = 2
    --bug short    the third step takes one micro-batch, its loss divided by K = 2 as the
                   others' (the epoch's last, cut short): half the mean gradient
    --retain       backward(retain_graph=True): still K forwards, K micro-batches (the
                   flag alone does not make the backward passes one objective's parts)
    --fixed        sum over tokens, divided by the step's 40 valid tokens
    --fixed --none the reduction='none' regression loss, its mean divided by K
    --fixed --sum  each micro-batch's loss a sum over its tokens, undivided: the step's
                   gradient is the sum over its 40 tokens, as one batch's with
                   reduction='sum' (no loss_not_divided)
    --fixed --sum --how legacy|positional|module
                   the same sum asked for otherwise: `size_average=False` (torch's
                   deprecated pair, which decides over `reduction`), `reduction` by position,
                   `nn.CrossEntropyLoss(size_average=False)` (read as a mean once, the legacy
                   pair: loss_not_divided and token_denominator warnings)
"""
import sys

import torch
from torch import nn

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else "tokens"
FIXED = "--fixed" in sys.argv
RETAIN = "--retain" in sys.argv
HOW = sys.argv[sys.argv.index("--how") + 1] if "--how" in sys.argv else ""
K = 2
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 11))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    batches = []
    micro = (30,) if BUG in ("short", "noneshort") and step == 2 else (30, 10)   # the last step cut short
    for valid in micro:                     # valid (non-padding) tokens of 2 x 20
        ids = torch.randint(0, 11, (2, 20))
        labels = ids.clone().view(-1)
        labels[valid:] = -100               # padding
        batches.append((ids, labels))
    total = sum(int((lab != -100).sum()) for _, lab in batches)       # 40
    for ids, labels in batches:
        logits = model(ids).view(-1, 11)
        if FIXED and HOW == "legacy":
            loss = nn.functional.cross_entropy(logits, labels, size_average=False)
        elif FIXED and HOW == "positional":
            loss = nn.functional.cross_entropy(logits, labels, None, None, -100, None, "sum")
        elif FIXED and HOW == "module":
            loss = nn.CrossEntropyLoss(size_average=False)(logits, labels)
        elif FIXED and "--none" in sys.argv or BUG == "noneshort":
            per_sample = nn.functional.mse_loss(logits, torch.zeros_like(logits), reduction="none")
            loss = per_sample.mean() / K
        elif BUG == "nonenodiv":
            per_sample = nn.functional.mse_loss(logits, torch.zeros_like(logits), reduction="none")
            loss = per_sample.mean()
        elif FIXED and "--sum" in sys.argv:
            loss = nn.functional.cross_entropy(logits, labels, reduction="sum")
        elif FIXED:
            loss = nn.functional.cross_entropy(logits, labels, reduction="sum") / total
        elif BUG == "nodiv":
            loss = nn.functional.cross_entropy(logits, labels)
        elif BUG == "msenodiv":
            loss = nn.functional.mse_loss(logits, torch.zeros_like(logits))
        else:
            loss = nn.functional.cross_entropy(logits, labels) / K
        loss.backward(retain_graph=RETAIN)
    opt.step()
    opt.zero_grad()
