"""Planted bug (check 7): a validation pass puts the model in eval mode and training goes
on without model.train(): dropout off, BatchNorm on running statistics.

    python eval_mode.py            # the bug
    python eval_mode.py --fixed    # model.train() after validation
    python eval_mode.py --fixed --frozen-bn   # and the BatchNorm frozen on purpose (eval,
                                              # no gradient): not a finding
    python eval_mode.py --fixed --loss-net    # and a frozen loss network with Dropout in
                                              # eval (a perceptual loss): not a finding
    python eval_mode.py --fixed --norm-eval   # and the BatchNorm put in eval after
                                              # model.train(), its affine parameters still
                                              # training (mmdetection's norm_eval=True): not a
                                              # finding
    python eval_mode.py --norm-eval           # the bug (no model.train()) with it: a finding
    python eval_mode.py --functional          # the bug, the model's only dropout a functional
                                              # call, F.dropout(h, p, training=self.training)
                                              # (BART's, Whisper's layers): once unseen
    python eval_mode.py --functional --fixed  # model.train() after validation
    python eval_mode.py --functional --fixed --hard-false   # training=False written on
                                              # purpose while the module trains: not a finding
    python eval_mode.py --fixed --grad-validation   # validation without torch.no_grad(),
                                              # then model.train(): not a finding (it was)
    python eval_mode.py --grad-validation     # and without model.train(): the bug
    python eval_mode.py --fixed --loss-net --trainable-loss-net   # the loss network in eval
                                              # but not frozen: gradients kept for its
                                              # parameters, which no optimizer holds
                                              # (wasted_gradients; not eval_mode)
    python eval_mode.py --merged              # the bug, the model's first layer a LoRA-like
                                              # one (loralib's `merge_weights=True`): eval()
                                              # merges B @ A into its frozen weight and its
                                              # forward then skips A and B, which get no
                                              # gradient from step 2 on: once unseen
    python eval_mode.py --merged --fixed      # model.train() after validation
"""
import contextlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

FIXED = "--fixed" in sys.argv
FROZEN_BN = "--frozen-bn" in sys.argv
LOSS_NET = "--loss-net" in sys.argv
TRAINABLE_LOSS_NET = "--trainable-loss-net" in sys.argv
FUNCTIONAL = "--functional" in sys.argv
HARD_FALSE = "--hard-false" in sys.argv
GRAD_VALIDATION = "--grad-validation" in sys.argv


class Block(nn.Module):
    """A layer that drops with torch.nn.functional, as transformers' BART layers do."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return F.dropout(torch.relu(self.fc(x)), 0.1, training=False if HARD_FALSE else self.training)


class Merged(nn.Linear):
    """A low-rank update beside a frozen weight, merged into it in eval (loralib's Linear)."""

    def __init__(self, n: int, r: int = 2) -> None:
        super().__init__(n, n)
        self.weight.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(r, n) * 0.1)
        self.B = nn.Parameter(torch.randn(n, r) * 0.1)
        self.merged = False

    def train(self, mode: bool = True):
        super().train(mode)
        if mode == self.merged:   # merge on eval(), take it out on train()
            self.weight.data += (1 if not mode else -1) * (self.B @ self.A)
            self.merged = not mode
        return self

    def forward(self, x):
        out = F.linear(x, self.weight, self.bias)
        return out if self.merged else out + x @ self.A.T @ self.B.T


NORM_EVAL = "--norm-eval" in sys.argv
torch.manual_seed(0)
# the output flows through it, but no gradient reaches its own (frozen) parameters
loss_net = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4))
loss_net.eval().requires_grad_(TRAINABLE_LOSS_NET)
model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.1),
                      nn.Linear(8, 2))
if FUNCTIONAL:   # no Dropout or BatchNorm module at all
    model = nn.Sequential(nn.Linear(8, 8), Block(8), nn.Linear(8, 2))
if "--merged" in sys.argv:   # no Dropout or BatchNorm either
    model = nn.Sequential(Merged(8), nn.ReLU(), nn.Linear(8, 2))
if FROZEN_BN:
    model[1].requires_grad_(False)
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    out = model(x)
    loss = nn.functional.cross_entropy(out, y)
    if LOSS_NET:
        loss = loss + loss_net(out).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    model.eval()                    # validation
    with torch.no_grad() if not GRAD_VALIDATION else contextlib.nullcontext():
        for _ in range(2):
            model(torch.randn(4, 8))
    if FIXED:
        model.train()
    if (FROZEN_BN or NORM_EVAL) and not FUNCTIONAL:
        model[1].eval()
