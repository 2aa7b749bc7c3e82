"""PEER (PEER-pytorch) and minGRU (minGRU-pytorch), lucidrains, as their READMEs use them,
tiny and seeded, nothing downloaded.

    python tests/clients/train_peer_mingru.py --steps 3 --model peer
    memledger trace tests/clients/train_peer_mingru.py --steps 2 -o p.ledger -- --model mingru
    memledger compare tests/clients/train_peer_mingru.py -p 'checkpoint:blocks.*' -- --model peer

Models (`--model`):

- `peer`: a token LM of `--depth` residual blocks `x = x + PEER(x)` (the README's
  `out = peer(x) + x`, `pre_rmsnorm=True`): product-key retrieval of `--experts` (a
  square) tiny experts, whose down and up weights are `nn.Embedding` rows gathered per
  token and head. `--heads`, `--topk` (`num_experts_per_head`), `--separate`
  (`separate_embed_per_head`), `--competing` (softmax scores, `non_competing_scores=False`),
  `--mask` (`train_mem_mask`: only the first half of the experts train, through the
  library's detach trick), `--lora` (`PEERLora`: expert LoRAs added to a feedforward),
  `--chunk N` (`ChunkedPEER`: the library checkpoints each chunk of N tokens itself),
  `--sparse` (the expert tables' `sparse=True`: sparse gradients, `SparseAdam` for them,
  Adam for the rest), `--dropout`.
- `mingru`: the library's `minLM` (`--lstm`: minLSTM, `--conv`: the causal depthwise conv)
  trained on next tokens as its train.py, Adam with clipping; `--generate N` samples N
  tokens each step by recurrent decoding (`prev_hiddens` carried token to token, as
  train.py's `base_decoding` with caching).
- `rnn`: a stack of bare `minGRU` layers (`--lstm`: `minLSTM`) trained by truncated BPTT:
  the sequence in `--chunks` chunks, each layer's last hidden state carried to the next
  chunk (detached unless `--no-detach`), one backward per chunk.

All: `--accum N`, `--validate` (a loss under no_grad in eval mode each step), `--amp`
(bf16 autocast), `--sgd` (plain SGD instead of Adam).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from minGRU_pytorch.minGRU import minGRU
from minGRU_pytorch.minLM import minLM
from minGRU_pytorch.minLSTM import minLSTM
from PEER_pytorch import PEER, ChunkedPEER, PEERLora

NUM_TOKENS = 32


class PEERNet(nn.Module):
    """Embedding, `depth` residual PEER blocks, a norm and the logits."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.emb = nn.Embedding(NUM_TOKENS, args.dim)
        blocks = []
        for _ in range(args.depth):
            if args.lora:
                peer = PEERLora(args.dim, num_experts=args.experts, heads=args.heads,
                                num_experts_per_head=args.topk, pre_rmsnorm=True,
                                non_competing_scores=not args.competing,
                                dropout=args.dropout)
            else:
                peer = PEER(args.dim, num_experts=args.experts, heads=args.heads,
                            num_experts_per_head=args.topk, pre_rmsnorm=True,
                            separate_embed_per_head=args.separate,
                            non_competing_scores=not args.competing, dropout=args.dropout)
            if args.sparse:
                for m in peer.modules():
                    if isinstance(m, nn.Embedding):
                        m.sparse = True
            blocks.append(ChunkedPEER(peer, args.chunk) if args.chunk else peer)
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.RMSNorm(args.dim)
        self.to_logits = nn.Linear(args.dim, NUM_TOKENS, bias=False)
        self.mask = None
        if args.mask:
            self.mask = torch.arange(args.experts) < args.experts // 2  # (experts,) bool

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x, labels = tokens[:, :-1], tokens[:, 1:]
        x = self.emb(x)  # (b, n, d)
        for block in self.blocks:
            x = x + (block(x, train_mem_mask=self.mask) if self.mask is not None else block(x))
        logits = self.to_logits(self.norm(x))
        return F.cross_entropy(logits.transpose(1, 2), labels)


class RNNStack(nn.Module):
    """Residual minGRU / minLSTM layers; the hidden states come in and go out."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        rnn = minLSTM if args.lstm else minGRU
        self.emb = nn.Embedding(NUM_TOKENS, args.dim)
        self.layers = nn.ModuleList(rnn(args.dim, expansion_factor=1.5)
                                    for _ in range(args.depth))
        self.to_logits = nn.Linear(args.dim, NUM_TOKENS, bias=False)

    def forward(self, x: torch.Tensor, labels: torch.Tensor, hiddens: list | None):
        x = self.emb(x)
        nexts = []
        for i, layer in enumerate(self.layers):
            out, h = layer(x, hiddens[i] if hiddens else None, return_next_prev_hidden=True)
            x = x + out
            nexts.append(h)
        return F.cross_entropy(self.to_logits(x).transpose(1, 2), labels), nexts


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="peer", choices=["peer", "mingru", "rnn"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--topk", type=int, default=4)
    p.add_argument("--separate", action="store_true")
    p.add_argument("--competing", action="store_true")
    p.add_argument("--mask", action="store_true")
    p.add_argument("--lora", action="store_true")
    p.add_argument("--chunk", type=int, default=0)
    p.add_argument("--sparse", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lstm", action="store_true")
    p.add_argument("--conv", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    p.add_argument("--chunks", type=int, default=2)
    p.add_argument("--no-detach", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--amp", action="store_true")
    p.add_argument("--sgd", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    if args.model == "peer":
        model = PEERNet(args)
    elif args.model == "mingru":
        model = minLM(num_tokens=NUM_TOKENS, dim=args.dim, depth=args.depth, ff_mult=2,
                      use_lstm=args.lstm, enable_conv=args.conv, dropout=args.dropout)
    else:
        model = RNNStack(args)

    sparse_ids = {id(m.weight) for m in model.modules()
                  if isinstance(m, nn.Embedding) and m.sparse}
    sparse = [q for q in model.parameters() if id(q) in sparse_ids]
    dense = [q for q in model.parameters() if id(q) not in sparse_ids]
    optims = [torch.optim.SGD(dense, lr=1e-2) if args.sgd else torch.optim.Adam(dense, lr=1e-3)]
    if sparse:
        optims.append(torch.optim.SparseAdam(sparse, lr=1e-3))

    def batch() -> torch.Tensor:
        return torch.randint(0, NUM_TOKENS, (args.batch, args.seq_len + 1))

    def loss_of(tokens: torch.Tensor) -> torch.Tensor:
        if args.model == "mingru":
            return model(tokens, return_loss=True)
        return model(tokens)

    hiddens = None
    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                if args.model == "rnn":
                    tokens = batch()
                    if args.no_detach:
                        hiddens = None  # the graph may not reach into the last step
                    n = args.seq_len // args.chunks
                    for c in range(args.chunks):
                        x = tokens[:, c * n:(c + 1) * n]
                        y = tokens[:, c * n + 1:(c + 1) * n + 1]
                        loss, hiddens = model(x, y, hiddens)
                        if not args.no_detach:
                            hiddens = [h.detach() for h in hiddens]
                        (loss / args.accum).backward(retain_graph=args.no_detach)
                    continue
                loss = loss_of(batch())
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.model == "mingru":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        for o in optims:
            o.step()
        for o in optims:
            o.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate and args.model != "rnn":
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of(batch()).item():.4f}")
        if args.generate and args.model == "mingru":
            # train.py's base_decoding with caching: the prompt once, then one token at a
            # time with the carried hidden states (no_grad, eval mode)
            model.eval()
            with torch.no_grad():
                out = torch.randint(0, NUM_TOKENS, (1, 4))
                prev = None
                for _ in range(args.generate):
                    logits, prev = model(out, return_prev_hiddens=True, prev_hiddens=prev)
                    nxt = torch.multinomial(logits[:, -1].softmax(-1), 1)
                    out = torch.cat((out, nxt), dim=-1)
            print("sample", out.tolist())


if __name__ == "__main__":
    main()
