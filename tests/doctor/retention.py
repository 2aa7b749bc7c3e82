"""Planted bug (check 6): the running loss keeps every step's autograd graph.

    python retention.py                # total_loss += loss
    python retention.py --bug list     # losses.append(loss)
    python retention.py --bug dict     # history["loss"].append(loss)
    python retention.py --bug tuples   # records.append((step, loss))
    python retention.py --bug meter    # pytorch/examples' AverageMeter given the loss itself
    python retention.py --bug deque    # a smoothing window: deque(maxlen=100).append(loss)
    python retention.py --bug values   # a list of dict views: views.append(outputs), the
                                       # outputs a `dict_values` (HRM-pytorch's hiddens)
    python retention.py --bug module   # a helper of the project's keeps it in a module list
    python retention.py --bug mapping  # the list, with a mapping that computes its items
    python retention.py --fixed        # total_loss += loss.item()
"""
import collections
import sys

import torch
from torch import nn

from retention_log import log_loss


class AverageMeter:
    def __init__(self):
        self.sum, self.count = 0, 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n


class LazyMapping(dict):
    """transformers' `MODEL_MAPPING` (`_LazyAutoMapping`, an OrderedDict): `items()` imports
    every model class it names, and raises on one this install lacks."""

    def items(self):
        raise ValueError("Could not find VoxtralRealtimeTextModel")


BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else "sum"
if BUG == "mapping":
    MODEL_MAPPING = LazyMapping()   # HF's run_clm_no_trainer.py imports it at the top
FIXED = "--fixed" in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
total_loss = 0.0
losses = []
history, records = {"loss": []}, []
meter, window = AverageMeter(), collections.deque(maxlen=100)
views = []
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if FIXED:
        total_loss += loss.item()
    elif BUG in ("list", "mapping"):
        losses.append(loss)
    elif BUG == "dict":
        history["loss"].append(loss)
    elif BUG == "tuples":
        records.append((step, loss))
    elif BUG == "meter":
        meter.update(loss, x.size(0))
    elif BUG == "deque":
        window.append(loss)
    elif BUG == "values":
        outputs = {"loss": loss}.values()
        views.append(outputs)
    elif BUG == "module":
        log_loss(loss)
    else:
        total_loss += loss
