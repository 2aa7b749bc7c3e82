"""Torch-level mechanics on a small residual model with `blocks.*`, one per `--case`:

- `plain`: a residual MLP (with `--opt` any torch optimizer, or transformers' Adafactor);
- `fno`: an FNO-style spectral conv (`torch.fft.rfft` / `irfft`, `torch.cfloat` weights);
- `weightnorm`, `orthogonal`, `spectral`: `torch.nn.utils.parametrizations` on each block;
- `prune`: `torch.prune.l1_unstructured` (a forward pre-hook rewriting `weight`);
- `qat`: eager fake-quant QAT (`torch.ao.quantization.prepare_qat`);
- `persample`: per-sample gradients by `torch.func.vmap(grad(...))` + `functional_call`,
  written into `.grad` by hand, then the optimizer;
- `channels_last`: a small CNN with `memory_format=torch.channels_last` and
  `clip_grad_norm_(foreach=True)`;
- `penalty`: the residual MLP with a gradient penalty, `autograd.grad(loss, first block's
  fc1.weight, create_graph=True)` added to the loss (WGAN-GP, R1): two backward passes,
  the first building a graph;
- `compiled_block`: the residual MLP with its second block `torch.compile`'d (`--backend`,
  default `eager`): the wrapper and the block it wraps answer to one name, `blocks.1`;
- `lora_conv`: residual conv blocks (conv, BatchNorm in training mode, ReLU, conv) with
  peft LoRA on the convolutions, whose frozen weights take no gradient, so a re-run's
  activations make the peak;
- `sparse`: `nn.Embedding(sparse=True)` under `SparseAdam` and the dense rest under Adam
  (two optimizers, one step);
- `kept`: the residual MLP whose blocks keep their GELU output in a dict of the script's
  (`KEPT[id(block)] = h`, activations kept for a look after the step): held into backward
  and made again, and kept, by a checkpoint's re-run; `stash`: the same kept as the
  block's attribute (`self.h = h`);
- `cached_bias`: the residual MLP adding a position bias that a module shared by the
  blocks makes on its first call and keeps as a buffer, slicing it after (x-transformers'
  ALiBi does so);
- `own_cache`: each block scales its GELU output by a table its own `cache` module makes
  on the first call and keeps as a buffer (PaLM's rotary embedding does so per block);
- `lazy`: the residual MLP with `fc1 = nn.LazyLinear(...)`: its weight is made in the
  first forward, inside the block, after the optimizer was built;
- `two_kinds`: three blocks over two kinds of rows, `a` and `b`, each reading the other
  through the script's index (`index_select`, which saves it), as PyG's `HeteroConv` does
  over node types; only `a` reaches the loss, so the last block's `b` branch is dead.
- `running_range`: each block's input goes through an observer that keeps its running
  minimum as a buffer made anew on every call (I-BERT's `QuantAct`: `self.x_min =
  self.x_min + m` from zeros on the first call, `self.x_min * 0.9 + m * 0.1` after);
  `ema_range`: the same with the second form on every call;
- `dead_save`: the residual MLP with `x.abs()` before each block, its result dropped: a
  save outside every region whose node dies at once (torchdiffeq does so before each call).

    python tests/clients/train_mech.py --case fno --opt adam --steps 3
    memledger trace tests/clients/train_mech.py --steps 2 -o m.ledger -- --case qat
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import prune

W = 32


class Block(nn.Module):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(W)
        self.fc1 = nn.Linear(W, 4 * W)
        self.fc2 = nn.Linear(4 * W, W)
        P = nn.utils.parametrizations
        if case == "lazy":   # made at the first forward (Note [Lazy parameters])
            self.fc1 = nn.LazyLinear(4 * W)
        if case == "weightnorm":
            self.fc1 = P.weight_norm(self.fc1)
        elif case == "orthogonal":
            self.fc2 = P.orthogonal(nn.Linear(4 * W, W))
        elif case == "spectral":
            self.fc1 = P.spectral_norm(self.fc1)
        elif case == "weightnorm-old":   # the deprecated hook: sets fc1.weight per forward
            self.fc1 = nn.utils.weight_norm(self.fc1)
        elif case == "prune":
            prune.l1_unstructured(self.fc1, "weight", amount=0.3)

        if case in ("running_range", "ema_range"):
            self.observer = RunningMin(init=case == "running_range")
        if case == "own_cache":
            self.cache = CachedBias(4 * W)
        self.case = case

    def forward(self, x):
        if hasattr(self, "observer"):
            x = self.observer(x)
        if hasattr(self, "pos"):
            x = x + self.pos[0](x.shape[1])
        h = F.gelu(self.fc1(self.ln(x)))
        if hasattr(self, "cache"):
            h = h * self.cache(x.shape[1])
        if self.case == "kept":      # activations kept for a look after the step
            KEPT[id(self)] = h
        elif self.case == "stash":   # the same, as an attribute of the block
            self.h = h
        return x + self.fc2(h)


KEPT: dict = {}


class CachedBias(nn.Module):
    """A bias made on the first call, kept as a buffer, and sliced by later calls."""
    def __init__(self, width: int = W) -> None:
        super().__init__()
        self.width = width

    def forward(self, n: int) -> torch.Tensor:
        if getattr(self, "bias", None) is None or self.bias.shape[0] < n:
            w = self.width
            bias = torch.arange(n * w, dtype=torch.float32).view(n, w).mul(1.0 / (n * w))
            self.register_buffer("bias", bias, persistent=False)
            return self.bias
        return self.bias[:n]


class RunningMin(nn.Module):
    """A running minimum kept as a buffer, rebound on every call; `init`: the first call
    (the buffer still zero) takes another path, as I-BERT's activation ranges do."""
    def __init__(self, init: bool) -> None:
        super().__init__()
        self.register_buffer("x_min", torch.zeros(()))
        self.init = init

    def forward(self, x):
        m = x.detach().min()
        if self.init and self.x_min.abs() < 1e-5:
            self.x_min = self.x_min + m
        else:
            self.x_min = self.x_min * 0.9 + m * 0.1
        return x


class Spectral(nn.Module):
    """FNO's spectral conv: rfft over the sequence, a complex weight on the low modes."""
    def __init__(self, modes: int = 6) -> None:
        super().__init__()
        self.modes = modes
        self.w = nn.Parameter(torch.randn(W, W, modes, dtype=torch.cfloat) / W)
        self.skip = nn.Linear(W, W)

    def forward(self, x):   # x: (B, L, W)
        xf = torch.fft.rfft(x.transpose(1, 2), dim=-1)          # (B, W, L/2+1) complex
        out = torch.zeros_like(xf)
        out[..., :self.modes] = torch.einsum("bim,iom->bom", xf[..., :self.modes], self.w)
        y = torch.fft.irfft(out, n=x.shape[1], dim=-1).transpose(1, 2)
        return F.gelu(y + self.skip(x))


class Net(nn.Module):
    def __init__(self, case: str, depth: int = 2) -> None:
        super().__init__()
        mk = (lambda: Spectral()) if case == "fno" else (lambda: Block(case))
        self.blocks = nn.ModuleList(mk() for _ in range(depth))
        self.head = nn.Linear(W, 10)
        self.case = case
        if case == "cached_bias":
            self.pos = CachedBias()   # one module called by every block, as ALiBi is
            for b in self.blocks:
                b.pos = [self.pos]    # in a list: not a submodule of each block

    def forward(self, x):
        for b in self.blocks:
            if self.case == "dead_save":
                x.abs()   # saves x for a backward that never comes: the result is dropped
            x = b(x)
        return self.head(x.mean(1) if x.dim() == 3 else x)


class Mixer(nn.Module):
    """Two kinds of rows, each reading the other's through the script's index `idx`."""
    def __init__(self) -> None:
        super().__init__()
        self.aa, self.ab, self.ba = nn.Linear(W, W), nn.Linear(W, W), nn.Linear(W, W)

    def forward(self, a, b, idx):
        a2 = F.relu(self.aa(a) + self.ab(b.index_select(0, idx)))
        b2 = F.relu(self.ba(a.index_select(0, idx)))   # the last block's: on no loss path
        return a2, b2


class TwoKinds(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Mixer() for _ in range(3))
        self.head = nn.Linear(W, 10)

    def forward(self, a, b, idx):
        for blk in self.blocks:
            a, b = blk(a, b, idx)
        return self.head(a)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(
            nn.Conv2d(c, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()) for c in (3, 16))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean((2, 3)))


class ResConv(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1, self.bn, self.c2 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), \
            nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return x + self.c2(F.relu(self.bn(self.c1(x))))


class ResCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = nn.ModuleList(ResConv(16) for _ in range(2))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean((2, 3)))


class QATNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(W, 4 * W), nn.ReLU(),
                                                  nn.Linear(4 * W, W)) for _ in range(2))
        self.head = nn.Linear(W, 10)
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        for b in self.blocks:
            x = b(x)
        return self.dequant(self.head(x))


class SparseNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(500, W, sparse=True)
        self.blocks = nn.ModuleList(Block("plain") for _ in range(2))
        self.head = nn.Linear(W, 10)

    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(1))


def optimizer(name: str, params):
    O = torch.optim
    table = {
        "adam": lambda: O.Adam(params, lr=1e-3),
        "adam-amsgrad": lambda: O.Adam(params, lr=1e-3, amsgrad=True),
        "adam-loop": lambda: O.Adam(params, lr=1e-3, foreach=False),
        "adam-max": lambda: O.Adam(params, lr=1e-3, maximize=True),
        "adam-fused": lambda: O.Adam(params, lr=1e-3, fused=True),
        "adagrad": lambda: O.Adagrad(params, lr=1e-2),
        "rmsprop": lambda: O.RMSprop(params, lr=1e-3, centered=True, momentum=0.9),
        "nadam": lambda: O.NAdam(params, lr=1e-3),
        "nadam-decoupled": lambda: O.NAdam(params, lr=1e-3, decoupled_weight_decay=True,
                                           weight_decay=0.01),
        "radam": lambda: O.RAdam(params, lr=1e-3),
        "adamax": lambda: O.Adamax(params, lr=1e-3),
        "asgd": lambda: O.ASGD(params, lr=1e-3),
        "rprop": lambda: O.Rprop(params, lr=1e-3),
        "adadelta": lambda: O.Adadelta(params),
        "sgd-nesterov": lambda: O.SGD(params, lr=1e-2, momentum=0.9, nesterov=True),
        "adamw-capturable": lambda: O.AdamW(params, lr=1e-3, capturable=False, amsgrad=True),
    }
    if name == "adafactor":
        from transformers.optimization import Adafactor
        return Adafactor(params, lr=1e-3, relative_step=False, scale_parameter=False)
    return table[name]()


ap = argparse.ArgumentParser()
ap.add_argument("--case", default="plain")
ap.add_argument("--opt", default="adam")
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--backend", default="eager")   # compiled_block: torch.compile's backend
a = ap.parse_args()
torch.manual_seed(0)
g = torch.Generator().manual_seed(1)

if a.case == "channels_last":
    model = CNN().to(memory_format=torch.channels_last)
elif a.case == "lora_conv":
    import peft

    model = peft.get_peft_model(ResCNN(), peft.LoraConfig(r=4, target_modules=["c1", "c2"]))
elif a.case == "qat":
    model = QATNet()
    model.train()
    model.qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")
    model = torch.ao.quantization.prepare_qat(model)
elif a.case == "sparse":
    model = SparseNet()
elif a.case == "two_kinds":
    model = TwoKinds()
    rows_a, rows_b = torch.randn(64, W, generator=g), torch.randn(64, W, generator=g)
    idx = torch.randperm(64, generator=g)   # the script's: kept for every step
else:
    model = Net(a.case)
if a.case == "compiled_block":
    model.blocks[1] = torch.compile(model.blocks[1], backend=a.backend)
model.train()

if a.case == "sparse":
    dense = [p for n, p in model.named_parameters() if not n.startswith("emb.")]
    opts = [torch.optim.SparseAdam(model.emb.parameters(), lr=1e-3),
            optimizer(a.opt, dense)]
else:
    opts = [optimizer(a.opt, [p for p in model.parameters() if p.requires_grad])]

if a.case == "persample":
    from torch.func import functional_call, grad, vmap

    names = [n for n, _ in model.named_parameters()]

    def sample_loss(params, x, y):
        out = functional_call(model, params, (x.unsqueeze(0),))
        return F.cross_entropy(out, y.unsqueeze(0))

for step in range(a.steps):
    if a.case == "channels_last":
        x = torch.randn(a.batch, 3, 16, 16, generator=g).to(memory_format=torch.channels_last)
    elif a.case == "lora_conv":
        x = torch.randn(a.batch, 3, 16, 16, generator=g)
    elif a.case == "sparse":
        x = torch.randint(0, 500, (a.batch, 12), generator=g)
    elif a.case == "qat":
        x = torch.randn(a.batch, W, generator=g)
    elif a.case == "two_kinds":
        x = None
    else:
        x = torch.randn(a.batch, 12, W, generator=g)
    y = torch.randint(0, 10, (64 if a.case == "two_kinds" else a.batch,), generator=g)
    for o in opts:
        o.zero_grad(set_to_none=True)
    if a.case == "persample":
        params = {n: p.detach() for n, p in model.named_parameters()}
        grads = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)
        for n, p in model.named_parameters():
            p.grad = grads[n].mean(0)
    else:
        out = model(rows_a, rows_b, idx) if a.case == "two_kinds" else model(x)
        loss = F.cross_entropy(out, y)
        if a.case == "penalty":
            (gw,) = torch.autograd.grad(loss, model.blocks[0].fc1.weight, create_graph=True)
            loss = loss + 0.1 * gw.square().sum()
        loss.backward()
    if a.case == "channels_last":
        nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    for o in opts:
        o.step()
