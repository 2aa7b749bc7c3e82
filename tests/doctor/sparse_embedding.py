"""A sparse embedding (sparse gradients) trained with SparseAdam: no finding, and no crash."""
import argparse, torch, torch.nn as nn, torch.nn.functional as F
p = argparse.ArgumentParser(); p.add_argument("--steps", type=int, default=4); a = p.parse_args()
torch.manual_seed(0)
emb = nn.Embedding(10000, 64, sparse=True); head = nn.Linear(64, 10)
m = nn.ModuleDict({"emb": emb, "head": head})
o1 = torch.optim.SparseAdam(emb.parameters()); o2 = torch.optim.Adam(head.parameters())
class Net(nn.Module):
    def __init__(s): super().__init__(); s.emb = emb; s.head = head
    def forward(s, ids): return s.head(s.emb(ids).mean(1))
net = Net()
for s in range(a.steps):
    ids = torch.randint(0, 10000, (16, 5)); y = torch.randint(0, 10, (16,))
    F.cross_entropy(net(ids), y).backward(); o1.step(); o2.step(); o1.zero_grad(); o2.zero_grad()
