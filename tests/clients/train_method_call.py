"""Greedy decoding through a recurrent model's own `step` method, as xlstm's `model.step`.

    python tests/clients/train_method_call.py --prompts 1
    memledger trace tests/clients/train_method_call.py --steps-by whole -o method.ledger

Each `Cell` is an LSTM cell whose `step(x, state)` runs its input projection (`proj`, a
Linear) and its LayerNorm as module calls and the gates' state math itself (its `forward`,
a whole sequence, is not called here); `Net.step`
runs the embedding, each cell's `step` and the head. The script calls `model.step` under
no_grad for each token of a prompt and then for each new token (the states handed back
and in), so no module call is open while the cells' state math runs: only the Linear,
LayerNorm and Embedding calls are module calls (Note [Work a module's method does outside
any call], memledger/trace/collector.py).
"""

import argparse

import torch
from torch import nn


class Cell(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(2 * width, 4 * width)
        self.norm = nn.LayerNorm(width)

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        """A whole sequence (batch, time, width), from zero states (training's way)."""
        zero = xs.new_zeros(xs.shape[0], xs.shape[-1])
        state, out = (zero, zero), []
        for t in range(xs.shape[1]):
            x, state = self.step(xs[:, t], state)
            out.append(x)
        return torch.stack(out, 1)

    def step(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        h, c = state
        i, f, o, g = self.proj(torch.cat([x, h], -1)).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return x + self.norm(h), (h, c)


class Net(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.cells = nn.ModuleList(Cell(width) for _ in range(layers))
        self.head = nn.Linear(width, vocab)
        self.width = width

    def step(self, tok: torch.Tensor, states: list | None = None):
        x = self.embed(tok)
        if states is None:
            zero = x.new_zeros(x.shape[0], self.width)
            states = [(zero, zero) for _ in self.cells]
        out = []
        for cell, state in zip(self.cells, states):
            x, state = cell.step(x, state)
            out.append(state)
        return self.head(x), out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--prompts", type=int, default=1)
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=4)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.vocab, args.width, args.layers).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(args.prompts):
            prompt = torch.randint(0, args.vocab, (args.batch, args.prompt_len), generator=gen)
            states = None
            for t in range(args.prompt_len):
                logits, states = model.step(prompt[:, t], states)
            tok = logits.argmax(-1)
            out = [tok]
            for _ in range(args.new_tokens - 1):
                logits, states = model.step(tok, states)
                tok = logits.argmax(-1)
                out.append(tok)
            print("generated", torch.stack(out, 1).tolist())


if __name__ == "__main__":
    main()
