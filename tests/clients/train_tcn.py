"""Temporal convolutional networks with pytorch-tcn and sparse attention with entmax, as
their READMEs write them. Seeded, tiny, nothing downloaded.

    python tests/clients/train_tcn.py --steps 3 --mode causal
    memledger trace tests/clients/train_tcn.py --steps 2 -o tcn.ledger -- --mode causal
    memledger compare tests/clients/train_tcn.py --steps 2 -p 'checkpoint:tcn.network.*' \
        -- --mode causal

Modes (`--mode`):

- `causal`: `pytorch_tcn.TCN` (causal, `use_norm='weight_norm'`, `dilation_reset`,
  `kernel_initializer='kaiming_uniform'`, `use_skip_connections=True`, an output
  projection) regressing the next values of noisy sines, Adam; after each training step an
  evaluation pass in the README's streaming mode: `model.eval()`, `reset_buffers()`, then
  the sequence fed chunk by chunk through `model.inference(chunk)` (each `TemporalPad1d`
  keeps the last samples of its input in its `buffer` between calls), under `no_grad`.
- `batch_norm`: the same TCN, non-causal, `use_norm='batch_norm'`, `input_shape='NLC'`,
  `xavier_uniform`, classifying whole sequences (mean over time, cross-entropy); evaluated
  with a plain forward in eval mode.
- `layer_norm`: non-causal, `use_norm='layer_norm'`, gated (`use_gate=True`), `NCL`.
- `entmax15` / `sparsemax` / `bisect` / `modules`: a small attention classifier: token
  embeddings, an `attn` module (a query per head against the tokens, scores through
  `entmax15`, `sparsemax`, `entmax_bisect` with a learnt alpha, or (`modules`) entmax's
  `Entmax15` and `Sparsemax` modules, `attn.act` and `attn.gate`), an MLP `head`; its
  logits trained with entmax's losses (`Entmax15Loss`, `SparsemaxLoss`, `EntmaxBisectLoss`).
- `tagger`: a tag per token over `--tags` (300) tags with padding, `Entmax15Loss` with its
  default partial sort (`k=100`, doubled where the support fills it) and `ignore_index`;
  the attention's `entmax15(k=8)` partially sorted too.

`--embed add|concat` conditions every block of the causal TCN on a learnt embedding of the
sequence's kind (pytorch-tcn's `embedding_shapes`); `--eval-grad` runs the streaming
evaluation with gradients on (a bug the doctor names); `--bf16` runs the training forward
under CPU bf16 autocast.
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CHANNELS, LENGTH, CHUNK, EMBED = 4, 64, 16, 6


class Forecaster(nn.Module):
    """The TCN and nothing else: its module paths are `tcn.network.*`."""

    def __init__(self, args) -> None:
        super().__init__()
        from pytorch_tcn import TCN

        self.cond = nn.Embedding(3, EMBED) if args.embed != "none" else None
        if args.mode == "causal":
            self.tcn = TCN(CHANNELS, [args.width] * args.levels, kernel_size=3,
                           dilation_reset=4, dropout=0.1, causal=True, use_norm="weight_norm",
                           activation="relu", kernel_initializer="kaiming_uniform",
                           use_skip_connections=True, output_projection=CHANNELS,
                           embedding_shapes=[(EMBED,)] if self.cond is not None else None,
                           embedding_mode=args.embed if self.cond is not None else "add")
        elif args.mode == "batch_norm":
            self.tcn = TCN(CHANNELS, [args.width] * (args.levels - 1) + [2 * args.width],
                           kernel_size=3, dropout=0.1, causal=False, use_norm="batch_norm",
                           activation="relu", kernel_initializer="xavier_uniform",
                           use_skip_connections=True, input_shape="NLC",
                           output_projection=args.classes)
        else:
            self.tcn = TCN(CHANNELS, [args.width] * args.levels, kernel_size=3,
                           dilation_reset=2, dropout=0.0, causal=False, use_norm="layer_norm",
                           activation="tanh", kernel_initializer="xavier_normal",
                           use_skip_connections=True, use_gate=True,
                           output_projection=args.classes)

    def forward(self, x: torch.Tensor, kind: torch.Tensor | None = None) -> torch.Tensor:
        if self.cond is None:
            return self.tcn(x)
        return self.tcn(x, embeddings=self.cond(kind))


def sines(gen: torch.Generator, batch: int) -> torch.Tensor:
    """(batch, CHANNELS, LENGTH + 1): a sine per channel, random frequency and phase."""
    t = torch.arange(LENGTH + 1, dtype=torch.float32)
    freq = 0.05 + 0.25 * torch.rand(batch, CHANNELS, 1, generator=gen)
    phase = 2 * math.pi * torch.rand(batch, CHANNELS, 1, generator=gen)
    return torch.sin(freq * t + phase) + 0.05 * torch.randn(batch, CHANNELS, LENGTH + 1,
                                                            generator=gen)


def stream(model: Forecaster, seq: torch.Tensor, grad: bool = False) -> torch.Tensor:
    """The README's streaming inference: one sequence (batch 1) fed CHUNK samples at a
    time, each call continuing from the buffers the last one left (`grad`: the bug of
    running it with gradients on)."""
    model.eval()
    model.tcn.reset_buffers()
    outs = []
    emb = {} if model.cond is None else {"embeddings": model.cond.weight[:1]}   # kind 0
    with torch.set_grad_enabled(grad):
        for start in range(0, seq.shape[-1], CHUNK):
            outs.append(model.tcn.inference(seq[..., start:start + CHUNK], **emb))
    model.train()
    return torch.cat(outs, dim=-1)


def train_tcn(args) -> None:
    gen = torch.Generator().manual_seed(0)
    model = Forecaster(args)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        data = sines(gen, args.batch)
        if args.mode == "causal":
            x, y = data[..., :-1], data[..., 1:]
            kind = torch.randint(3, (args.batch,), generator=gen) if model.cond else None
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = F.mse_loss(model(x, kind).float(), y)
        else:
            label = (data[:, 0, :].mean(-1) > 0).long() % args.classes
            x = data[..., :-1]
            if args.mode == "batch_norm":
                x = x.transpose(1, 2)          # NLC in, NLC out
                logits = model(x).mean(1)
            else:
                logits = model(x).mean(-1)
            loss = F.cross_entropy(logits, label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.mode == "causal":
            val = sines(gen, 1)
            pred = stream(model, val[..., :-1], args.eval_grad)
            err = F.mse_loss(pred, val[..., 1:]).item()
        else:
            model.eval()
            with torch.no_grad():
                val = sines(gen, args.batch)[..., :-1]
                out = model(val.transpose(1, 2) if args.mode == "batch_norm" else val)
                err = float(out.abs().mean())
            model.train()
        print(f"step {step}  loss {loss.item():.4f}  eval {err:.4f}")


class SparseAttention(nn.Module):
    """Multi-head attention pooling: a learnt query per head, the scores over the tokens
    through a sparse mapping (entmax's Functions), the weights pooling the values."""

    def __init__(self, dim: int, heads: int, kind: str) -> None:
        super().__init__()
        self.heads, self.kind = heads, kind
        self.query = nn.Parameter(torch.randn(heads, dim // heads) / math.sqrt(dim // heads))
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        if kind == "bisect":
            self.alpha = nn.Parameter(torch.tensor(1.5))
        if kind == "modules":   # entmax's nn.Module wrappers: a module of their own
            from entmax import Entmax15, Sparsemax

            self.act = Entmax15(dim=-1)
            self.gate = Sparsemax(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from entmax import entmax15, entmax_bisect, sparsemax

        b, n, d = x.shape
        k = self.key(x).view(b, n, self.heads, d // self.heads)
        v = self.value(x).view(b, n, self.heads, d // self.heads)
        scores = torch.einsum("bnhe,he->bhn", k, self.query)
        if self.kind == "entmax15":
            w = entmax15(scores, dim=-1)
        elif self.kind == "tagger":   # a partial sort of the 8 largest, doubled where short
            w = entmax15(scores, dim=-1, k=8)
        elif self.kind == "modules":  # entmax15 over the tokens, sparsemax over the heads
            w = self.act(scores) * self.gate(scores.mean(-1)).unsqueeze(-1) * self.heads
        elif self.kind == "sparsemax":
            w = sparsemax(scores, dim=-1)
        else:
            w = entmax_bisect(scores, alpha=self.alpha.clamp(1.01, 2.0), dim=-1, n_iter=25)
        return torch.einsum("bhn,bnhe->bhe", w, v).reshape(b, d)


class Classifier(nn.Module):
    def __init__(self, args) -> None:
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.width)
        self.attn = SparseAttention(args.width, 4, args.mode)
        self.head = nn.Sequential(nn.Linear(args.width, args.width), nn.GELU(),
                                  nn.Linear(args.width, args.classes))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.attn(self.embed(tokens)))


class Tagger(nn.Module):
    """A label per token over a large tag set: each token's embedding joined with the
    sentence's attention-pooled summary, an MLP `head` to `--tags` logits."""

    def __init__(self, args) -> None:
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.width)
        self.attn = SparseAttention(args.width, 4, "tagger")
        self.head = nn.Sequential(nn.Linear(2 * args.width, args.width), nn.GELU(),
                                  nn.Linear(args.width, args.tags))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        e = self.embed(tokens)
        s = self.attn(e).unsqueeze(1).expand_as(e)
        return self.head(torch.cat([e, s], dim=-1))


def train_entmax(args) -> None:
    from entmax import Entmax15Loss, EntmaxBisectLoss, SparsemaxLoss

    gen = torch.Generator().manual_seed(0)
    if args.mode == "tagger":
        return train_tagger(args, gen)
    model = Classifier(args)
    loss_fn = {"entmax15": lambda: Entmax15Loss(k=None),
               "modules": lambda: Entmax15Loss(k=None),
               "sparsemax": lambda: SparsemaxLoss(),
               "bisect": lambda: EntmaxBisectLoss(alpha=1.5, n_iter=25)}[args.mode]()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        tokens = torch.randint(args.vocab, (args.batch, LENGTH), generator=gen)
        label = tokens[:, :4].sum(-1) % args.classes      # the class sits in the first tokens
        loss = loss_fn(model(tokens), label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}  loss {loss.item():.4f}")


def train_tagger(args, gen: torch.Generator) -> None:
    """Token tagging with padding: `Entmax15Loss` with its default partial sort (k=100 of
    `--tags`) and `ignore_index` for the padded positions, as a seq2seq decoder's loss."""
    from entmax import Entmax15Loss

    model = Tagger(args)
    loss_fn = Entmax15Loss(ignore_index=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        tokens = torch.randint(1, args.vocab, (args.batch, LENGTH), generator=gen)
        lengths = torch.randint(LENGTH // 2, LENGTH + 1, (args.batch, 1), generator=gen)
        pad = torch.arange(LENGTH) >= lengths
        tokens = tokens.masked_fill(pad, 0)
        tags = (tokens * 7 % (args.tags - 1) + 1).masked_fill(pad, 0)
        logits = model(tokens)
        loss = loss_fn(logits.reshape(-1, args.tags), tags.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}  loss {loss.item():.4f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="causal", choices=["causal", "batch_norm", "layer_norm",
                                                        "entmax15", "sparsemax", "bisect", "tagger",
                                                        "modules"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--levels", type=int, default=4)
    p.add_argument("--classes", type=int, default=5)
    p.add_argument("--vocab", type=int, default=50)
    p.add_argument("--tags", type=int, default=300)
    p.add_argument("--embed", default="none", choices=["none", "add", "concat"],
                   help="condition each block on a learnt embedding (--mode causal)")
    p.add_argument("--bf16", action="store_true", help="the TCN's forward under bf16 autocast")
    p.add_argument("--eval-grad", action="store_true",
                   help="the streaming evaluation without no_grad (a bug)")
    args = p.parse_args()
    torch.manual_seed(0)
    if args.mode in ("causal", "batch_norm", "layer_norm"):
        train_tcn(args)
    else:
        train_entmax(args)


if __name__ == "__main__":
    main()
