"""The project's own training helpers, imported by helper_accum.py: each runs backward()
itself, in this file, as infini-transformer-pytorch's wrapper runs it inside the library.

`segment_step` is that wrapper's loss in plain torch: the sequence in segments, a
`cross_entropy(reduction='none')` per segment, its masked mean times the segment's share of
the sequence's valid tokens, a backward on the running sum every `every` segments and at the
last, divided by `scale` (the caller's number of micro-batches a step).
"""
import torch.nn.functional as F


def segment_step(model, seq, labels, segment=4, every=2, scale=1.0, ignore=-100):
    total_tokens = (labels != ignore).sum().item()
    total = running = 0.
    pieces = list(zip(seq.split(segment, -1), labels.split(segment, -1)))
    for i, (x, y) in enumerate(pieces):
        losses = F.cross_entropy(model(x).transpose(1, 2), y, reduction="none")   # (b, n)
        mask = y != ignore
        part = losses[mask].mean() * (mask.sum() / total_tokens)
        total = total + part
        running = running + part
        if (i + 1) % every == 0 or i + 1 == len(pieces):
            (running / scale).backward()
            running = 0.
    return total


def mean_step(model, x, y, scale=1.0):
    loss = F.cross_entropy(model(x), y)
    (loss / scale).backward()
    return loss


def heads_step(model, heads, x, y, scale=1.0):
    """Deep supervision: two heads' means on the one batch, summed: one objective."""
    h = model(x)
    loss = sum(F.cross_entropy(head(h), y) for head in heads)
    (loss / scale).backward()
    return loss
