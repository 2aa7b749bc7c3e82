"""An LSTM (or --kind gru) language model with weight_norm blocks and a spectral_norm head
(torch.nn.utils.parametrizations). docs/accuracy.md, "MoE, parametrizations, TorchScript,
RNNs".

    memledger compare tests/clients/train_rnn.py -p 'offload:blocks.*' -- --steps 5 --kind gru
"""
import argparse, torch, torch.nn as nn
from torch.nn.utils import parametrizations as P
ap = argparse.ArgumentParser(); ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--kind", default="lstm"); a = ap.parse_args()
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(s, h):
        super().__init__()
        s.rnn = (nn.LSTM if a.kind == "lstm" else nn.GRU)(h, h, batch_first=True)
        s.proj = P.weight_norm(nn.Linear(h, h))
        s.norm = nn.LayerNorm(h)
    def forward(s, x):
        y, _ = s.rnn(x)
        return s.norm(x + torch.tanh(s.proj(y)))
class LM(nn.Module):
    def __init__(s, v=100, h=64, n=3):
        super().__init__()
        s.emb = nn.Embedding(v, h)
        s.blocks = nn.ModuleList(Block(h) for _ in range(n))
        s.head = P.spectral_norm(nn.Linear(h, v))
    def forward(s, x):
        h = s.emb(x)
        for b in s.blocks: h = b(h)
        return s.head(h)
m = LM(); opt = torch.optim.Adam(m.parameters(), 1e-3)
g = torch.Generator().manual_seed(1)
for step in range(a.steps):
    x = torch.randint(0, 100, (8, 32), generator=g)
    loss = nn.functional.cross_entropy(m(x).flatten(0, 1), x.roll(-1, 1).flatten())
    loss.backward(); nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step(); opt.zero_grad()
    print("step", step, loss.item())
