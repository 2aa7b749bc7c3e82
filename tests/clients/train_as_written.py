"""Small transformers written the way tutorials and course code write them (helper script
for tests/clients/test_as_written.py; docs/accuracy.md, "Other people's training scripts,
a second round").

    python tests/clients/train_as_written.py --case container
    python tests/clients/train_as_written.py --case masked
    python tests/clients/train_as_written.py --case relu
    python tests/clients/train_as_written.py --case filled

- `container`: each block keeps its MLP in an nn.ModuleDict and calls its parts through a
  closure (`m.proj(m.act(m.fc(x)))`), and its attention heads in an nn.ModuleList, called
  one by one: neither container has a forward of its own (Note [Containers]).
- `masked`: attention scores `q @ k.transpose(-2, -1)` on 4-D tensors (a `bmm`, then an
  `_unsafe_view` of its output), masked in place (`masked_fill_`): torch's selective
  checkpoint caches the `bmm`, whose version counter the fill never touches (Note [Written
  in place in forward]).
- `relu`: the same blocks with the MLP's Linear (on a 3-D input: a view of its `addmm`)
  followed by an in-place ReLU, which torch's selective checkpoint does see.
- `filled`: `relu`'s blocks with the scores from `torch.bmm` on 3-D tensors (heads folded
  into the batch), masked in place: the `bmm`'s own output, changed before the MLP's
  `addmm` view is (Note [The kept op a re-run finds changed], replay/stateful.py).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

C, T, HEADS, V = 32, 16, 4, 50


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(C, 3 * (C // HEADS), bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        return att.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf")).softmax(-1) @ v


class ContainerBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.heads = nn.ModuleList(Head() for _ in range(HEADS))
        self.mlp = nn.ModuleDict(dict(fc=nn.Linear(C, 4 * C), act=nn.GELU(),
                                      proj=nn.Linear(4 * C, C)))
        m = self.mlp
        self.mlpf = lambda x: m.proj(m.act(m.fc(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + torch.cat([head(h) for head in self.heads], dim=-1)
        return x + self.mlpf(self.ln2(x))


class MaskedBlock(nn.Module):
    def __init__(self, inplace_relu: bool, bmm: bool = False) -> None:
        super().__init__()
        self.bmm = bmm
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.out = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C),
                                 nn.ReLU(inplace=True) if inplace_relu else nn.GELU(),
                                 nn.Linear(4 * C, C))
        self.register_buffer("mask", torch.ones(T, T).triu(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q, k, v = (t.view(b, T, HEADS, -1).transpose(1, 2)
                   for t in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        if self.bmm:   # the heads folded into the batch: the bmm's output itself
            att = torch.bmm(q.reshape(b * HEADS, T, -1), k.reshape(b * HEADS, T, -1)
                            .transpose(1, 2)).view(b, HEADS, T, T)
        else:
            att = q @ k.transpose(-2, -1)
        att.masked_fill_(self.mask.bool(), -torch.inf)
        y = torch.softmax(att / k.shape[-1] ** 0.5, dim=-1) @ v
        x = x + self.out(y.transpose(1, 2).reshape(b, T, C))
        return x + self.mlp(self.ln2(x))


class LM(nn.Module):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, C)
        self.blocks = nn.Sequential(*(ContainerBlock() if case == "container" else
                                      MaskedBlock(case in ("relu", "filled"), case == "filled")
                                      for _ in range(2)))
        self.head = nn.Linear(C, V)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.emb(idx)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=["container", "masked", "relu", "filled"], required=True)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = LM(args.case)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        idx = torch.randint(0, V, (4, T + 1))
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
