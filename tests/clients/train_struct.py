"""torch-struct (structured distributions over semirings) as its README trains a tagger or
a parser, in a hand loop or in a torchbearer `Trial`. Seeded, tiny, nothing downloaded.

    python tests/clients/train_struct.py --steps 3 --model chain
    memledger trace tests/clients/train_struct.py --steps 2 -o s.ledger -- --loop trial
    memledger compare tests/clients/train_struct.py -p 'checkpoint:blocks.*' -- --model dep

The network: a token embedding, an encoder (`--encoder mlp`: `--depth` residual blocks of
LayerNorm, Linear, GELU, Linear; `lstm`: a one-layer bidirectional `nn.LSTM`), then a
scorer that makes the distribution's log-potentials, and `crf`, a module of no parameters
that builds the distribution and returns the loss (the dynamic program runs in it, over
many small tensors: a binary scan for the chains, Eisner's or CKY's charts for the trees).

Models (`--model`): `chain` (`LinearChainCRF`: emissions plus a (C, C) transition, (B,
N-1, C, C)), `semi` (`SemiMarkovCRF`, segments up to `--width` K: (B, N-1, K, C, C)),
`dep` (`DependencyCRF`: biaffine arc scores, the root on the diagonal, (B, N, N); gold
heads a left-to-right chain), `tree` (`TreeCRF`: span scores (B, N, N, NT); gold a
right-branching tree).

Losses (`--loss`): `nll` (-log_prob of the gold structure: score minus the partition, the
partition by the semiring's sum), `marginals` (-sum of the gold parts' marginals, which
the library computes with `torch.autograd.grad(..., create_graph=True)` inside the
forward, so the backward goes through a backward), `entropy` (nll minus 0.1 x the
entropy, by `EntropySemiring`). `--semiring checkpoint` computes the chain's partition with
`CheckpointSemiring(LogSemiring)` (its own autograd Function that recomputes each matmul in
backward). `--lengths`: sentences of different lengths (one full). `--decode`: argmax
under no_grad after each step; `--keep-argmax`: the argmax taken under gradients and kept
in a list for a metric (a graph kept per step: the doctor's `unused_graph` warning).

Loops (`--loop`): `hand` (a plain loop, AdamW, `--clip`), `trial` (torchbearer:
`Trial(model, optimizer, criterion, metrics=['loss'])` over a DataLoader, its criterion
calling `model.crf`; `--clip` as its `GradientNormClipping` callback, `--sched` its
`StepLR`, `--valid` a validation generator; torchbearer steps the optimizer with a
closure that runs forward and backward).
"""

import argparse
import warnings

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from torch_struct import (CheckpointSemiring, DependencyCRF, DepTree, LinearChain,
                          LinearChainCRF, LogSemiring, SemiMarkovCRF, TreeCRF)


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ff(self.norm(x))


class ChainScorer(nn.Module):
    """Emissions plus a transition: phi(n, z_{n+1}, z_n), the first emission in n = 0."""

    def __init__(self, dim: int, classes: int, width: int = 1) -> None:
        super().__init__()
        self.classes, self.width = classes, width
        self.emit = nn.Linear(dim, width * classes)
        self.trans = nn.Parameter(torch.randn(classes, classes) * 0.1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, n, _ = h.shape
        c, k = self.classes, self.width
        e = self.emit(h).view(b, n, k, c)                       # (B, N, K, C)
        lp = e[:, 1:, :, :, None] + self.trans                  # (B, N-1, K, C, C)
        lp = lp + torch.cat([e[:, :1, :, None, :], e.new_zeros(b, n - 2, k, 1, c)], 1)
        return lp if k > 1 else lp[:, :, 0]                     # chain: (B, N-1, C, C)


class ArcScorer(nn.Module):
    """Biaffine arc scores, phi(head, child), the root scores on the diagonal."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.head, self.dep, self.root = nn.Linear(dim, dim), nn.Linear(dim, dim), \
            nn.Linear(dim, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        arcs = self.head(h) @ self.dep(h).transpose(1, 2)       # (B, N, N)
        eye = torch.eye(h.shape[1], dtype=torch.bool)
        return torch.where(eye, self.root(h), arcs)


class SpanScorer(nn.Module):
    """phi(i, j, nt) from the sum of the span's end points."""

    def __init__(self, dim: int, labels: int) -> None:
        super().__init__()
        self.span = nn.Linear(dim, labels)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.span(torch.tanh(h[:, :, None] + h[:, None, :]))   # (B, N, N, NT)


class StructLoss(nn.Module):
    """Builds the distribution from the log-potentials and returns the batch's mean loss."""

    def __init__(self, model: str, classes: int, width: int, loss: str,
                 semiring: str) -> None:
        super().__init__()
        self.model, self.classes, self.width = model, classes, width
        self.loss, self.semiring = loss, semiring

    def dist(self, lp: torch.Tensor, lengths: torch.Tensor):
        if self.model == "chain":
            return LinearChainCRF(lp, lengths=lengths)
        if self.model == "semi":
            return SemiMarkovCRF(lp, lengths=lengths)
        if self.model == "dep":
            return DependencyCRF(lp, lengths=lengths)
        return TreeCRF(lp, lengths=lengths)

    def gold(self, y: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if self.model == "chain":
            return LinearChain.to_parts(y.clamp(min=0), self.classes, lengths=lengths)
        if self.model == "semi":
            return SemiMarkovCRF.struct.to_parts(y.clamp(min=-1), (self.classes, self.width),
                                                 lengths=lengths)
        if self.model == "dep":
            return DepTree.to_parts(y.clamp(min=0), None, lengths=lengths)
        b, n = y.shape
        parts = torch.zeros(b, n, n, 1, dtype=torch.long)    # right-branching spans
        for i in range(b):
            m = int(lengths[i])
            for s in range(m):
                parts[i, s, m - 1, 0] = parts[i, s, s, 0] = 1
        return parts

    def forward(self, lp: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        lengths = (y >= 0).sum(1) if self.model != "semi" else (y >= -1).sum(1)
        gold = self.gold(y, lengths).to(lp.dtype)
        d = self.dist(lp, lengths)
        if self.loss == "marginals":
            return -(d.marginals * gold).sum() / y.shape[0]
        if self.semiring == "checkpoint":
            part = LinearChain(CheckpointSemiring(LogSemiring)).sum(lp, lengths)
            score = (lp * gold).flatten(1).sum(1)
            return (part - score).mean()
        nll = -d.log_prob(gold)
        if self.loss == "entropy":
            nll = nll - 0.1 * d.entropy
        return nll.mean()


class Parser(nn.Module):
    def __init__(self, args, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, args.dim)
        if args.encoder == "lstm":
            self.lstm = nn.LSTM(args.dim, args.dim // 2, batch_first=True, bidirectional=True)
        else:
            self.blocks = nn.Sequential(*[Block(args.dim) for _ in range(args.depth)])
        if args.model in ("chain", "semi"):
            self.scorer = ChainScorer(args.dim, args.classes,
                                      args.width if args.model == "semi" else 1)
        elif args.model == "dep":
            self.scorer = ArcScorer(args.dim)
        else:
            self.scorer = SpanScorer(args.dim, 1)
        self.crf = StructLoss(args.model, args.classes, args.width, args.loss, args.semiring)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)                                  # (B, N, dim)
        h = self.lstm(h)[0] if hasattr(self, "lstm") else self.blocks(h)
        return self.scorer(h)


def batch_of(args, vocab: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and gold targets, -1 past each sentence's length (semi: -2, as -1 continues
    a segment): tags (token mod C), heads (the previous word) or the length alone."""
    b, n = args.batch, args.seq
    tokens = torch.randint(0, vocab, (b, n), generator=g)
    lengths = torch.full((b,), n)
    if args.lengths:
        lengths[1:] = torch.randint(3, n + 1, (b - 1,), generator=g)
    pad = torch.arange(n)[None] >= lengths[:, None]
    if args.model == "dep":
        y = torch.arange(n).expand(b, n).clone()                # word i's head: word i-1
    elif args.model == "semi":
        y = tokens % args.classes
        y[:, 1::2] = -1                                         # segments of two
    else:
        y = tokens % args.classes
    return tokens, y.masked_fill(pad, -2 if args.model == "semi" else -1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="chain", choices=["chain", "semi", "dep", "tree"])
    p.add_argument("--loss", default="nll", choices=["nll", "marginals", "entropy"])
    p.add_argument("--semiring", default="log", choices=["log", "checkpoint"])
    p.add_argument("--encoder", default="mlp", choices=["mlp", "lstm"])
    p.add_argument("--loop", default="hand", choices=["hand", "trial"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--width", type=int, default=3)
    p.add_argument("--lengths", action="store_true")
    p.add_argument("--decode", action="store_true")
    p.add_argument("--keep-argmax", action="store_true")
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--sched", action="store_true")
    p.add_argument("--valid", action="store_true")
    args = p.parse_args()
    # torch-struct's distributions define no `arg_constraints`: one warning per batch
    warnings.filterwarnings("ignore", message=".*does not define `arg_constraints`")
    torch.manual_seed(0)
    vocab = 32
    model = Parser(args, vocab)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)

    if args.loop == "trial":
        run_trial(args, model, optim, vocab, g)
        return
    kept = []
    for _ in range(args.steps):
        tokens, y = batch_of(args, vocab, g)
        loss = model.crf(model(tokens), y)
        optim.zero_grad()
        loss.backward()
        if args.clip:
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        lengths = (y >= 0).sum(1) if args.model != "semi" else (y >= -1).sum(1)
        if args.decode:
            with torch.no_grad():
                model.crf.dist(model(tokens), lengths).argmax
        if args.keep_argmax:   # the best parses kept for a metric at the epoch's end
            kept.append(model.crf.dist(model(tokens), lengths).argmax)


def run_trial(args, model, optim, vocab: int, g: torch.Generator) -> None:
    from torchbearer import Trial
    from torchbearer.callbacks import GradientNormClipping, StepLR

    def data(steps: int) -> DataLoader:
        xs, ys = zip(*[batch_of(args, vocab, g) for _ in range(steps)])
        return DataLoader(TensorDataset(torch.cat(xs), torch.cat(ys)), batch_size=args.batch)

    def criterion(y_pred, y_true):
        return model.crf(y_pred, y_true)

    cbs = []
    if args.clip:
        cbs.append(GradientNormClipping(args.clip))
    if args.sched:
        cbs.append(StepLR(step_size=1, gamma=0.5))
    trial = Trial(model, optim, criterion, metrics=["loss"], callbacks=cbs, verbose=0)
    trial.with_train_generator(data(args.steps))
    if args.valid:
        trial.with_val_generator(data(1))
    trial.run(epochs=1)


if __name__ == "__main__":
    main()
