"""Planted bug (check 6): a saved-tensor hook's store that nothing empties.

The script's own `torch.autograd.graph.saved_tensors_hooks`: `pack` keeps each tensor
autograd saves for backward in a dict and returns its key, `unpack` reads it back. Nothing
removes an entry, so the dict keeps every forward's saves after their backward: 8 a step
on this MLP, the batch (256 B), the ReLU's output twice (512 B), the second weight's
transpose (the model's own: nothing more), the log-softmax twice (128 B), the targets (64
B) and the loss's weight total (4 B): 5 storages, 964 B a step (copies: 8, 1,860 B).

    python saved_hooks.py                  # the bug (once "`stash` carries autograd history
                                           # ... accumulate t.item() or t.detach() instead")
    python saved_hooks.py --copy           # the store keeps copies (`t.detach().clone()`,
                                           # an offload hook's): no history (once no finding)
    python saved_hooks.py --fixed          # unpack pops its entry (no finding)
    python saved_hooks.py --clear          # stash.clear() after each backward (no finding)
    python saved_hooks.py --keep-last      # cleared before each forward instead: one
                                           # forward's saves kept through the next (a warning)
    python saved_hooks.py --stacked        # the first layer under a pair whose unpack pops
                                           # (`kept`), the rest under the leaky pair stacked
                                           # inside it: 4 storages, 708 B a step (the ReLU's
                                           # output 512, the log-softmax 128, the targets 64,
                                           # the weight total 4); once no finding (only the
                                           # first pack seen was checked)
    python saved_hooks.py --stacked --fixed   # both pop (no finding)
    python saved_hooks.py --functional     # the hooks around a function of the script's
                                           # that calls no module (`F.linear` on the
                                           # model's weights): the same 5 storages, 964 B
                                           # a step; once no finding (hooks were read
                                           # only at module calls)
    python saved_hooks.py --functional --fixed   # (no finding)
"""
import sys

import torch
import torch.nn.functional as F
from torch import nn

COPY = "--copy" in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
stash = {}


def pack(t):
    stash[len(stash)] = t.detach().clone() if COPY else t
    return len(stash) - 1


def unpack(i):
    return stash.pop(i) if "--fixed" in sys.argv else stash[i]


kept = {}


def pack_first(t):
    kept[len(kept)] = t
    return len(kept) - 1


def unpack_first(i):
    return kept.pop(i)


def loss_of(x, y):
    h = F.relu(F.linear(x, model[0].weight, model[0].bias))
    return F.cross_entropy(F.linear(h, model[2].weight, model[2].bias), y)


for step in range(4):
    x, y = torch.randn(8, 8), torch.randint(0, 4, (8,))
    if "--keep-last" in sys.argv:
        stash.clear()
    if "--stacked" in sys.argv:
        with torch.autograd.graph.saved_tensors_hooks(pack_first, unpack_first):
            h = model[0](x)
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                loss = F.cross_entropy(model[2](model[1](h)), y)
    elif "--functional" in sys.argv:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = loss_of(x, y)
    else:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = F.cross_entropy(model(x), y)
    loss.backward()
    if "--clear" in sys.argv:
        stash.clear()
    opt.step()
    opt.zero_grad()
