"""agent-attention-pytorch (lucidrains) as its README writes it: an `AgentTransformer`
(learned agent tokens repeated per batch; each layer an `AgentSelfAttention` (RMSNorm,
one qkv projection over agents and tokens packed together, queries attend to the agents'
keys and the agents to the tokens, talking heads as 1x1 convs, sigmoid gates) that returns
new agent tokens too, and a feed-forward over agents and tokens packed with einops
`pack`/`unpack`), under a token embedding and a per-token classifier head (a small
sequence tagger). Seeded, tiny, nothing downloaded.

    python tests/clients/train_agent.py --steps 3
    memledger trace tests/clients/train_agent.py --steps 2 -o agent.ledger -- --mask

`--mask` (a key padding mask: the library fills the agents' similarities to padded tokens
and the padded outputs), `--no-gate`, `--no-talking` (talking_heads=False), `--sub-ln`
(sub_layernorm=True), `--dropout P`, `--accum N`, `--amp` (bf16 autocast), `--validate`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from agent_attention_pytorch import AgentTransformer


class Tagger(nn.Module):
    def __init__(self, args, tokens: int = 32, classes: int = 5) -> None:
        super().__init__()
        self.embed = nn.Embedding(tokens, args.dim)
        self.transformer = AgentTransformer(
            dim=args.dim, depth=args.depth, heads=2, dim_head=8,
            num_agent_tokens=args.agents, ff_mult=2, gate=not args.no_gate,
            talking_heads=not args.no_talking, sub_layernorm=args.sub_ln,
            dropout=args.dropout)
        self.head = nn.Linear(args.dim, classes)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.head(self.transformer(self.embed(ids), mask=mask))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--mask", action="store_true")
    p.add_argument("--no-gate", action="store_true")
    p.add_argument("--no-talking", action="store_true")
    p.add_argument("--sub-ln", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = Tagger(args)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_of() -> torch.Tensor:
        ids = torch.randint(0, 32, (args.batch, args.seq_len))
        mask = None
        if args.mask:
            mask = torch.ones(args.batch, args.seq_len, dtype=torch.bool)
            mask[0, args.seq_len // 2:] = False
        logits = model(ids, mask)
        return F.cross_entropy(logits.flatten(0, 1), torch.randint(0, 5, (ids.numel(),)))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
