"""MEGA (lucidrains' Mega-pytorch) as its train.py trains it: a tiny `Mega` language model
(each layer a `MegaLayer`: a multi-headed damped EMA computed as an FFT convolution,
`rfft`/`irfft` of complex spectra, then single-headed attention with a T5 relative
position bias and GRU-like reset and update gates, post-LayerNorm, a feedforward) inside
the library's `AutoregressiveWrapper` (`loss = model(seq)`), its `TextSamplerDataset`
(random windows of a byte corpus, `torch.randint` per item) through a `DataLoader`,
Adam, `GRADIENT_ACCUMULATE_EVERY` backward passes per step, `clip_grad_norm_`,
`optim.step()` then `optim.zero_grad()`, a validation loss under `no_grad` every
`--validate-every` steps and `model.generate` (top-k sampling, eval mode) every
`--generate-every`. Seeded, tiny, nothing downloaded: the corpus is random bytes.

    python tests/clients/train_mega.py --steps 3
    memledger trace tests/clients/train_mega.py --steps 2 -o mega.ledger
    memledger compare tests/clients/train_mega.py --steps 2 -p 'checkpoint:net.layers.*.0'

Flags: `--laplacian` (the Laplace attention function instead of softmax), `--bidirectional`
(`causal=False`: the EMA also runs over the flipped sequence), `--norm-heads` (GroupNorm
over the EMA heads), `--pre-norm`, `--autocast` (bf16 autocast around the forward),
`--freeze emb|ema|all-but-ema`, `--val-grad` (the validation forward without
`torch.no_grad()`: a slip the doctor names).
"""

import argparse
import contextlib
import random

import torch
from torch.utils.data import DataLoader, Dataset

from mega_pytorch import Mega, MultiHeadedEMA
from mega_pytorch.autoregressive_wrapper import AutoregressiveWrapper


class TextSamplerDataset(Dataset):
    """train.py's: a random window of `seq_len + 1` bytes, as int64 tokens."""

    def __init__(self, data: torch.Tensor, seq_len: int) -> None:
        super().__init__()
        self.data, self.seq_len = data, seq_len

    def __getitem__(self, index: int) -> torch.Tensor:
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
        return self.data[rand_start: rand_start + self.seq_len + 1].long()

    def __len__(self) -> int:
        return self.data.size(0) // self.seq_len


def cycle(loader):
    while True:
        yield from loader


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--ema-heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--accum", type=int, default=1, help="GRADIENT_ACCUMULATE_EVERY")
    p.add_argument("--validate-every", type=int, default=0, help="0: never")
    p.add_argument("--generate-every", type=int, default=0, help="0: never")
    p.add_argument("--generate-length", type=int, default=4)
    p.add_argument("--val-grad", action="store_true",
                   help="the validation forward outside torch.no_grad() (a slip: its graph "
                        "is kept until the next step's `loss =`)")
    p.add_argument("--laplacian", action="store_true")
    p.add_argument("--bidirectional", action="store_true")
    p.add_argument("--norm-heads", action="store_true")
    p.add_argument("--pre-norm", action="store_true")
    p.add_argument("--freeze", default="", choices=["", "emb", "ema", "all-but-ema"],
                   help="parameters left out of training (requires_grad_(False))")
    p.add_argument("--autocast", action="store_true", help="bf16 autocast (the FFTs run fp32)")
    args = p.parse_args()
    torch.manual_seed(0)
    random.seed(0)
    model = AutoregressiveWrapper(Mega(
        num_tokens=args.vocab, dim=args.dim, depth=args.depth, ff_mult=2,
        pre_norm=args.pre_norm, ema_heads=args.ema_heads, attn_dim_qk=8,
        attn_dim_value=2 * args.dim, laplacian_attn_fn=args.laplacian,
        causal=not args.bidirectional, norm_mhesa_heads=args.norm_heads))
    if args.freeze == "emb":
        model.net.token_emb.requires_grad_(False)
    elif args.freeze:   # "ema": the EMAs frozen; "all-but-ema": only the EMAs trained
        model.requires_grad_(args.freeze == "ema")
        for mod in model.modules():
            if isinstance(mod, MultiHeadedEMA):
                mod.requires_grad_(args.freeze != "ema")
    corpus = torch.randint(0, args.vocab, (40 * args.seq_len,), dtype=torch.uint8)
    train_x, valid_x = corpus[: 32 * args.seq_len], corpus[32 * args.seq_len:]
    train_dataset = TextSamplerDataset(train_x, args.seq_len)
    val_dataset = TextSamplerDataset(valid_x, args.seq_len)
    train_loader = cycle(DataLoader(train_dataset, batch_size=args.batch))
    val_loader = cycle(DataLoader(val_dataset, batch_size=args.batch))
    optim = torch.optim.Adam((p for p in model.parameters() if p.requires_grad), lr=2e-4)
    for i in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
                loss = model(next(train_loader))
            loss.backward()
        print(f"training loss: {loss.item()}")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        if args.validate_every and i % args.validate_every == 0:
            model.eval()
            with torch.no_grad() if not args.val_grad else contextlib.nullcontext():
                loss = model(next(val_loader))
                print(f"validation loss: {loss.item()}")
        if args.generate_every and i % args.generate_every == 0:
            model.eval()
            inp = random.choice(val_dataset)[:-1]
            sample = model.generate(inp[None, ...], args.generate_length)
            print("generated", sample[0].tolist())


if __name__ == "__main__":
    main()
