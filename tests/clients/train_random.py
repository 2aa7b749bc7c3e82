"""A model drawn at random from a seed, for differential tests of the replay: each of its
blocks runs a random sequence of the mechanics that decide what autograd saves and when
storages go (activations in place and not, views, normalisation, dropout, a dead save,
a kept tensor, a branch summed back, a sublayer called twice, a parameter shared by
blocks), and random ops run between the blocks, outside every region. Whatever the draw,
`predict` must equal `measure` under every policy (benchmarks/random_models.py runs many
seeds; tests/clients/test_random_models.py a few).

    python tests/clients/train_random.py --seed 7 --steps 3
    python tests/clients/train_random.py --seed 7 --show     # the drawn program
"""

import argparse
import random

import torch
import torch.nn.functional as F
from torch import nn

W, T = 32, 16

# One op a block may run on its running value `h` (B, T, W). Each keeps the shape.
BLOCK_OPS = ["linear", "linear_nobias", "relu", "relu_", "gelu", "tanh", "sigmoid", "silu",
             "layernorm", "dropout", "residual", "transpose", "reshape", "dead_save",
             "kept", "branch", "twice", "shared", "attention", "chunk_cat", "masked",
             "softmax", "scale_param", "clone_mul_"]
# `--menu wide` adds these (the basic menu's draws stay as they were): normalisations with
# state or their own formulas, a convolution over time, sdpa, gated MLPs, in-place writes
# into slices and dropout in place, gathers, bf16 autocast, reductions and powers.
WIDE_OPS = ["batchnorm", "conv", "sdpa", "swiglu", "rmsnorm", "slice_write", "dropout_",
            "gather", "autocast", "pow", "normalize", "cumsum", "detach_mix", "gelu_tanh",
            "relu_inplace"]
# `--menu deep` adds these (twenty-fifth session; the earlier menus' draws stay): group
# norm, einsum with a weight, a top-k scatter, a position embedding, logsumexp, where, an
# unfold window, a GRU, a std normalisation, an amax scale, index_add, sort, and a repeat.
DEEP_OPS = ["groupnorm", "einsum", "topk_scatter", "embedding", "logsumexp", "where",
            "unfold", "gru", "std", "amax", "index_add", "sort", "repeat"]
MENUS = {"basic": BLOCK_OPS, "wide": BLOCK_OPS + WIDE_OPS,
         "deep": BLOCK_OPS + WIDE_OPS + DEEP_OPS}
# Ops the model runs between blocks, outside every region.
BETWEEN_OPS = ["none", "none", "dead_save", "scale", "gelu", "residual_keep"]


def draw(seed: int, depth: int = 3, program: str = "",
         menu: str = "basic") -> tuple[list[list[str]], list[str]]:
    """The blocks' ops and the ops before each block: from `program` if given
    ("between/op op ...;between/op ..."), else drawn from `seed` and `menu`."""
    if program:
        parts = [p.split("/") for p in program.split(";")]
        return [ops.split() for _, ops in parts], [b for b, _ in parts]
    rng = random.Random(seed)
    ops_ = MENUS[menu]
    blocks = [[rng.choice(ops_) for _ in range(rng.randint(3, 7))] for _ in range(depth)]
    between = [rng.choice(BETWEEN_OPS) for _ in range(depth)]
    return blocks, between


class Block(nn.Module):
    def __init__(self, ops: list[str], shared: nn.Linear) -> None:
        super().__init__()
        self.ops = ops
        self.fc = nn.ModuleList(nn.Linear(W, W, bias=(op != "linear_nobias"))
                                for op in ops if op in ("linear", "linear_nobias"))
        self.ln = nn.LayerNorm(W)
        self.inner = nn.Linear(W, W)      # "twice": one sublayer called twice
        self.branch = nn.Linear(W, W)
        self.qkv = nn.Linear(W, 3 * W)
        self.gain = nn.Parameter(torch.ones(W))
        self.shared = [shared]             # a list: not this block's submodule
        # the wide menu's modules, made only where drawn (the basic draws' sizes stay)
        if "batchnorm" in ops:
            self.bn = nn.BatchNorm1d(W)
        if "conv" in ops:
            self.conv = nn.Conv1d(W, W, 3, padding=1)
        if "swiglu" in ops:
            self.up = nn.Linear(W, 4 * W)
            self.down = nn.Linear(2 * W, W)
        if "gather" in ops:
            self.register_buffer("perm", torch.randperm(T), persistent=False)
        # the deep menu's
        if "groupnorm" in ops:
            self.gn = nn.GroupNorm(4, W)
        if "einsum" in ops:
            self.mix = nn.Parameter(torch.randn(W, W) / W ** 0.5)
        if "embedding" in ops:
            self.emb = nn.Embedding(T, W)
            self.register_buffer("pos", torch.arange(T), persistent=False)
        if "gru" in ops:
            self.gru = nn.GRU(W, W, batch_first=True)
        if "index_add" in ops:
            self.register_buffer("rows", torch.randperm(T)[: T // 2], persistent=False)

    def forward(self, x):
        h, fc = x, iter(self.fc)
        for i, op in enumerate(self.ops):
            if op in ("linear", "linear_nobias"):
                h = next(fc)(h)
            elif op == "relu":
                h = F.relu(h)
            elif op == "relu_":
                h = h * 1.0          # a fresh tensor (a number's mul saves nothing), then
                h.relu_()            # in place on it
            elif op == "gelu":
                h = F.gelu(h)
            elif op == "tanh":
                h = torch.tanh(h)
            elif op == "sigmoid":
                h = torch.sigmoid(h)
            elif op == "silu":
                h = F.silu(h)
            elif op == "layernorm":
                h = self.ln(h)
            elif op == "dropout":
                h = F.dropout(h, 0.25, self.training)
            elif op == "residual":
                h = h + x
            elif op == "transpose":
                h = h.transpose(1, 2).contiguous().transpose(1, 2)
            elif op == "reshape":
                h = h.reshape(-1, W).mul(1.5).view(x.shape)
            elif op == "dead_save":
                h.sin()              # saves h, and its node dies at once
            elif op == "kept":   # kept for a look after the step, one attribute per place
                setattr(self, f"kept{i}", h.detach())
            elif op == "branch":
                h = h + torch.tanh(self.branch(h))
            elif op == "twice":
                h = self.inner(F.gelu(self.inner(h)))
            elif op == "shared":
                h = self.shared[0](h)
            elif op == "attention":
                q, k, v = self.qkv(h).chunk(3, dim=-1)
                a = torch.softmax(q @ k.transpose(1, 2) / W ** 0.5, dim=-1)
                h = a @ v
            elif op == "chunk_cat":
                a, b = h.chunk(2, dim=-1)
                h = torch.cat([b * torch.sigmoid(a), a], dim=-1)
            elif op == "masked":
                h = h.masked_fill(h < -1.0, 0.0)
            elif op == "softmax":
                h = torch.softmax(h, dim=-1) * W
            elif op == "scale_param":
                h = h * self.gain
            elif op == "clone_mul_":
                h = h.clone()
                h.mul_(0.5)
            elif op == "batchnorm":       # running statistics, channels in the middle
                h = self.bn(h.transpose(1, 2)).transpose(1, 2)
            elif op == "conv":
                h = self.conv(h.transpose(1, 2)).transpose(1, 2)
            elif op == "sdpa":
                h = F.scaled_dot_product_attention(h, h, h, is_causal=True)
            elif op == "swiglu":
                a, b = self.up(h).chunk(2, dim=-1)
                h = self.down(F.silu(a) * b)
            elif op == "rmsnorm":
                h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.gain
            elif op == "slice_write":     # in place into a slice of a fresh tensor
                h = h * 1.0
                h[:, 0] = 0.0
            elif op == "dropout_":
                h = F.dropout(h * 1.0, 0.25, self.training, inplace=True)
            elif op == "gather":
                h = h[:, self.perm]
            elif op == "autocast":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    h = self.inner(h)
                h = h.float()
            elif op == "pow":
                h = h.pow(2) * 0.5
            elif op == "normalize":
                h = F.normalize(h, dim=-1) * W ** 0.5
            elif op == "cumsum":
                h = h.cumsum(1) / T
            elif op == "detach_mix":
                h = h + 0.1 * h.detach()
            elif op == "gelu_tanh":
                h = F.gelu(h, approximate="tanh")
            elif op == "relu_inplace":
                h = F.relu(self.branch(h), inplace=True)
            elif op == "groupnorm":
                h = self.gn(h.transpose(1, 2)).transpose(1, 2)
            elif op == "einsum":
                h = torch.einsum("btw,wv->btv", h, self.mix)
            elif op == "topk_scatter":    # keep each token's 8 largest features
                vals, idx = h.topk(W // 4, dim=-1)
                h = torch.zeros_like(h).scatter(-1, idx, vals)
            elif op == "embedding":
                h = h + self.emb(self.pos)
            elif op == "logsumexp":
                h = h - torch.logsumexp(h, dim=-1, keepdim=True)
            elif op == "where":
                h = torch.where(h > 0, h, 0.1 * h)
            elif op == "unfold":          # the mean over a window of 3 tokens
                h = F.pad(h, (0, 0, 1, 1)).unfold(1, 3, 1).mean(-1)
            elif op == "gru":
                h = self.gru(h)[0]
            elif op == "std":
                h = (h - h.mean(-1, keepdim=True)) / (h.std(-1, keepdim=True) + 1e-5)
            elif op == "amax":
                h = h / h.abs().amax(-1, keepdim=True).clamp_min(1e-3)
            elif op == "index_add":
                h = h.index_add(1, self.rows, h[:, : T // 2] * 0.5)
            elif op == "sort":
                h = h.sort(dim=-1).values
            elif op == "repeat":
                h = h.repeat_interleave(2, dim=-1).view(*h.shape, 2).mean(-1)
        return h


class Net(nn.Module):
    def __init__(self, seed: int, program: str = "", menu: str = "basic") -> None:
        super().__init__()
        blocks, self.between = draw(seed, program=program, menu=menu)
        self.inp = nn.Linear(W, W)
        self.shared = nn.Linear(W, W)
        self.blocks = nn.ModuleList(Block(ops, self.shared) for ops in blocks)
        self.head = nn.Linear(W, 10)
        self.kept = []

    def forward(self, x):
        h = self.inp(x)
        self.kept = []
        for op, b in zip(self.between, self.blocks):
            if op == "dead_save":
                h.abs()
            elif op == "scale":
                h = h * 0.5
            elif op == "gelu":
                h = F.gelu(h)
            elif op == "residual_keep":
                self.kept.append(h)   # the model keeps a block's input to the step's end
            h = b(h)
        return self.head(h.mean(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--program", default="")   # instead of a draw: "between/op op ...;..."
    ap.add_argument("--menu", choices=list(MENUS), default="basic")
    ap.add_argument("--show", action="store_true")
    # the training loop around the model (twenty-fifth session): micro-batches per step,
    # and the whole forward and loss under bf16 autocast
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--amp", action="store_true")
    a = ap.parse_args()
    if a.show:
        blocks, between = draw(a.seed, program=a.program, menu=a.menu)
        print(";".join(f"{b}/{' '.join(ops)}" for ops, b in zip(blocks, between)))
        return
    torch.manual_seed(a.seed)
    model = Net(a.seed, a.program, a.menu)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    for step in range(a.steps):
        for _ in range(a.accum):
            x = torch.randn(a.batch, T, W, generator=g)
            y = torch.randint(0, 10, (a.batch,), generator=g)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp):
                loss = F.cross_entropy(model(x), y) / a.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
