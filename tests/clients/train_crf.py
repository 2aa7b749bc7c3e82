"""A BiLSTM-CRF tagger with pytorch-crf (`torchcrf.CRF`) as NER users write it, and the
tabular models of rtdl_revisiting_models (FT-Transformer, MLP, ResNet) as its README trains
them. Random data, seeded, built from config; nothing downloaded.

    python tests/clients/train_crf.py --mode tagger
    memledger trace tests/clients/train_crf.py --steps 2 -o crf.ledger -- --mode tagger
    memledger compare tests/clients/train_crf.py -p 'checkpoint:lstm' -- --mode tagger
    memledger trace tests/clients/train_crf.py --steps-by forward --steps 2 -- --mode decode

Modes (`--mode`):

- `tagger`: embedding -> `nn.LSTM(bidirectional=True, batch_first=True)` -> dropout ->
  `nn.Linear` emissions -> `CRF(num_tags, batch_first=True)`; the loss is
  `-crf(emissions, tags, mask=mask, reduction='mean')` over sentences of random lengths
  padded to the longest in the batch (the mask marks the real tokens), Adam,
  `clip_grad_norm_`, and every `--eval-every` steps an evaluation under `torch.no_grad()`
  with `crf.decode(emissions, mask=mask)` (token accuracy). `--packed`: the LSTM runs on
  `pack_padded_sequence(..., enforce_sorted=False)` and `pad_packed_sequence` back.
  `--cell gru`: a BiGRU in the LSTM's place (still `lstm`); `--amp`: the forward and the
  loss under `torch.autocast("cpu", dtype=torch.bfloat16)`.
- `decode`: the same tagger, evaluation only (no optimizer, no backward): `model.eval()`,
  `torch.no_grad()`, `crf.decode` per batch. Trace it with `--steps-by forward`.
- `ft`: `FTTransformer(n_cont_features, cat_cardinalities, d_out,
  **FTTransformer.get_default_kwargs(n_blocks))` on numeric and categorical columns,
  `model.make_default_optimizer()` (AdamW, two parameter groups), cross-entropy.
  `--linformer headwise|key-value`: Linformer's key/value compression (ratio 0.5), its
  projections shared by the layers (`backbone.blocks.0.attention` holds them).
- `mlp` / `resnet`: rtdl's `MLP` / `ResNet` on the numeric columns and the categorical
  ones one-hot, AdamW, cross-entropy.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class BiLSTMCRF(nn.Module):
    def __init__(self, vocab: int, num_tags: int, emb: int, hidden: int, layers: int,
                 packed: bool, cell: str = "lstm") -> None:
        from torchcrf import CRF

        super().__init__()
        self.packed = packed
        self.embedding = nn.Embedding(vocab, emb, padding_idx=0)
        rnn = nn.GRU if cell == "gru" else nn.LSTM   # the attribute keeps its name
        self.lstm = rnn(emb, hidden // 2, num_layers=layers, bidirectional=True,
                        batch_first=True, dropout=0.1 if layers > 1 else 0.0)
        self.dropout = nn.Dropout(0.1)
        self.hidden2tag = nn.Linear(hidden, num_tags)
        self.crf = CRF(num_tags, batch_first=True)

    def emissions(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = self.embedding(words)
        if self.packed:
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, _ = self.lstm(packed)
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=words.shape[1])
        else:
            out, _ = self.lstm(x)
        return self.hidden2tag(self.dropout(out))

    def forward(self, words, lengths, tags, mask):
        return -self.crf(self.emissions(words, lengths), tags, mask=mask, reduction="mean")

    def decode(self, words, lengths, mask):
        return self.crf.decode(self.emissions(words, lengths), mask=mask)


def sentences(gen: torch.Generator, batch: int, max_len: int, vocab: int, num_tags: int):
    """A padded batch: random lengths in [2, max_len], word ids 1.. (0 pads), tags."""
    lengths = torch.randint(2, max_len + 1, (batch,), generator=gen)
    lengths[0] = max_len   # the longest fixes the padded width
    t = torch.arange(max_len)
    mask = t[None, :] < lengths[:, None]
    words = torch.randint(1, vocab, (batch, max_len), generator=gen) * mask
    tags = torch.randint(0, num_tags, (batch, max_len), generator=gen) * mask
    return words, lengths, tags, mask


def tagger(args) -> None:
    gen = torch.Generator().manual_seed(1)
    model = BiLSTMCRF(args.vocab, args.tags, args.emb, args.hidden, args.layers, args.packed,
                      args.cell)
    if args.mode == "decode":
        model.eval()
        for step in range(args.steps):
            words, lengths, tags, mask = sentences(gen, args.batch, args.max_len, args.vocab,
                                                   args.tags)
            with torch.no_grad():
                paths = model.decode(words, lengths, mask)
            print(f"batch {step}  decoded {sum(len(p) for p in paths)} tokens")
        return
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        model.train()
        words, lengths, tags, mask = sentences(gen, args.batch, args.max_len, args.vocab,
                                               args.tags)
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            loss = model(words, lengths, tags, mask)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        if args.eval_every and (step + 1) % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                paths = model.decode(words, lengths, mask)
            right = sum(int((torch.tensor(p) == tags[i, :len(p)]).sum())
                        for i, p in enumerate(paths))
            print(f"step {step}  loss {loss.item():.4f}  acc {right / int(lengths.sum()):.3f}")
        else:
            print(f"step {step}  loss {loss.item():.4f}")


def tabular(args) -> None:
    import rtdl_revisiting_models as rtdl

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    cards = [3, 5, 7]
    n_classes = 3
    d_in = args.cont + sum(cards)
    if args.mode == "ft":
        kwargs = rtdl.FTTransformer.get_default_kwargs(args.blocks)
        if args.linformer:   # Linformer's compressed keys and values, shared across layers
            kwargs.update(linformer_kv_compression_ratio=0.5,
                          linformer_kv_compression_sharing=args.linformer)
        model = rtdl.FTTransformer(n_cont_features=args.cont, cat_cardinalities=cards,
                                   d_out=n_classes, **kwargs)
        optimizer = model.make_default_optimizer()
    elif args.mode == "mlp":
        model = rtdl.MLP(d_in=d_in, d_out=n_classes, n_blocks=args.blocks, d_block=64,
                         dropout=0.1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-5)
    else:
        model = rtdl.ResNet(d_in=d_in, d_out=n_classes, n_blocks=args.blocks, d_block=64,
                           d_hidden=None, d_hidden_multiplier=2.0, dropout1=0.15,
                           dropout2=0.0)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-5)
    for step in range(args.steps):
        model.train()
        x_cont = torch.randn(args.batch, args.cont, generator=gen)
        x_cat = torch.stack([torch.randint(0, c, (args.batch,), generator=gen)
                             for c in cards], 1)
        y = torch.randint(0, n_classes, (args.batch,), generator=gen)
        optimizer.zero_grad()
        if args.mode == "ft":
            logits = model(x_cont, x_cat)
        else:
            onehot = [F.one_hot(x_cat[:, i], c).float() for i, c in enumerate(cards)]
            logits = model(torch.cat([x_cont, *onehot], 1))
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        print(f"step {step}  loss {loss.item():.4f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["tagger", "decode", "ft", "mlp", "resnet"],
                    default="tagger")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--packed", action="store_true")
    ap.add_argument("--max-len", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--tags", type=int, default=5)
    ap.add_argument("--emb", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=1)
    ap.add_argument("--amp", action="store_true")      # tagger: bf16 autocast (CPU)
    ap.add_argument("--cell", choices=["lstm", "gru"], default="lstm")   # tagger: a BiGRU-CRF
    ap.add_argument("--cont", type=int, default=4)      # tabular: numeric columns
    ap.add_argument("--blocks", type=int, default=1)    # tabular: n_blocks
    ap.add_argument("--linformer", choices=["headwise", "key-value"])   # ft: kv compression
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.mode in ("tagger", "decode"):
        tagger(args)
    else:
        tabular(args)


if __name__ == "__main__":
    main()
