"""Mamba models trained with mambapy (pure-PyTorch Mamba, alxndrTL/mamba.py), as its README
and its training scripts write them: `Mamba(MambaConfig(d_model, n_layers))` on (B, L, D)
inputs, its language model `LM(config, vocab_size)` with `configure_optimizers` (AdamW,
llama2.c's decay groups) and next-token cross-entropy, Jamba (Mamba + attention layers, a
sparse MoE, its load-balancing loss) and Vision Mamba's bidirectional blocks. Random data,
seeded; tiny (d_model 16, 2 layers), nothing downloaded.

    python tests/clients/train_mambapy.py --steps 3 --mode pscan
    memledger trace tests/clients/train_mambapy.py --steps 2 -o mamba.ledger -- --mode lm
    memledger compare tests/clients/train_mambapy.py -p 'checkpoint:layers.*' -- --mode seq

Modes (`--mode`):

- `pscan`: `Mamba` with the parallel scan (`pscan=True`, the default): `PScan`, a custom
  autograd Function that clones its inputs, scans them in place (Blelloch) and saves the
  clone it returns a view of. `--seq-len` not a power of 2 pads instead of cloning.
- `seq`: the same with the sequential scan (`pscan=False`): a Python loop over time, one
  hidden state per position, stacked.
- `lm`: `mambapy.lm.LM` over a Mamba core, cross-entropy on shifted tokens, AdamW from
  `model.configure_optimizers`, gradient clipping. (`mambapy.lm` imports `mambapy.mamba2`,
  which needs mamba_ssm's Triton kernels at import: without CUDA they are stubbed, as CPU
  users of the Mamba-1 LM do; Mamba-2 itself cannot run without them.)
- `jamba`: `JambaLM` (Mamba layers with inner RMSNorms, one attention layer, sparse MoE on
  every other layer, tied embedding), loss = cross-entropy + 0.01 x load-balancing loss.
- `vim`: Vision Mamba's `VMamba` (bidirectional blocks: a second scan over the flipped
  sequence) on patch embeddings, mean-pooled into a classifier.
- `step`: the LM trained through its recurrent `step(token, caches)` (the inference
  cache, one token at a time, gradients through the carried hidden states).
- `tbptt`: truncated backpropagation through time over one long stream: each step runs
  the next `--seq-len` tokens through `step` from the caches the previous chunk left,
  detached.
- `generate`: no training: `LM.generate`'s loop (prompt, then top-k sampling, one
  `model.step` per token under `no_grad`) for `--steps` new tokens; trace it with
  `--steps-by forward` (a step per token: each `step` call) or `--steps-by whole`.
"""

import argparse
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

from mambapy.jamba import JambaLM, JambaLMConfig, load_balancing_loss
from mambapy.mamba import Mamba, MambaConfig

D_MODEL, N_LAYERS, BATCH, VOCAB = 16, 2, 2, 64


def import_lm():
    """`mambapy.lm` imports `mambapy.mamba2`, which imports mamba_ssm's Triton kernels at
    module level; on a CPU machine stand-ins let the Mamba-1 LM import."""
    try:
        import mamba_ssm  # noqa: F401
    except ImportError:
        for name in ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton",
                     "mamba_ssm.ops.triton.ssd_combined"):
            sys.modules.setdefault(name, types.ModuleType(name))
        combined = sys.modules["mamba_ssm.ops.triton.ssd_combined"]
        combined.mamba_chunk_scan_combined = combined.mamba_split_conv1d_scan_combined = None
    from mambapy.lm import LM
    return LM


class Regressor(nn.Module):
    """A Mamba backbone with a linear read-out, trained to predict a causal running mean."""

    def __init__(self, config: MambaConfig):
        super().__init__()
        self.mamba = Mamba(config)
        self.head = nn.Linear(config.d_model, 1)

    def forward(self, x):
        return self.head(self.mamba(x)).squeeze(-1)   # (B, L)


class PatchClassifier(nn.Module):
    """Vision Mamba as vim.py's README sketch: patch embeddings through VMamba, mean-pooled."""

    def __init__(self, patches: int, classes: int = 4):
        super().__init__()
        from mambapy.vim import MambaConfig as VimConfig, VMamba
        self.embed = nn.Linear(12, D_MODEL)
        self.pos = nn.Parameter(torch.zeros(1, patches, D_MODEL))
        self.vmamba = VMamba(VimConfig(d_model=D_MODEL, n_layers=N_LAYERS))
        self.head = nn.Linear(D_MODEL, classes)

    def forward(self, patches):
        x = self.embed(patches) + self.pos
        return self.head(self.vmamba(x).mean(dim=1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="pscan",
                   choices=["pscan", "seq", "lm", "jamba", "vim", "step", "tbptt",
                            "generate"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--autocast", action="store_true", help="the forward under bf16 autocast")
    p.add_argument("--mup", action="store_true",
                   help="muP (MambaConfig(mup=True)): RMSNorms without gains, muP's groups")
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    L = args.seq_len

    if args.mode in ("pscan", "seq"):
        model = Regressor(MambaConfig(d_model=D_MODEL, n_layers=N_LAYERS,
                                      pscan=args.mode == "pscan", mup=args.mup))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    elif args.mode in ("lm", "step", "tbptt", "generate"):
        LM = import_lm()
        model = LM(MambaConfig(d_model=D_MODEL, n_layers=N_LAYERS, mup=args.mup),
                   vocab_size=VOCAB)
        opt = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-3,
                                         betas=(0.9, 0.95), device_type="cpu")
    elif args.mode == "jamba":
        config = JambaLMConfig(d_model=D_MODEL, n_layers=4, mlp_size=32, vocab_size=VOCAB,
                               num_attention_heads=4, num_key_value_heads=2, num_experts=4,
                               num_experts_per_tok=2, attn_layer_offset=1,
                               attn_layer_period=4)
        model = JambaLM(config)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        model = PatchClassifier(L)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    if args.mode == "generate":
        generate(model, torch.randint(1, VOCAB, (1, 4), generator=gen), args.steps, gen)
        return
    model.train()
    if args.mode == "tbptt":
        train_tbptt(args, model, opt, gen, L)
        return
    for step in range(args.steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            loss = compute_loss(args, model, gen, L)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.mode in ("lm", "step", "jamba"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")


def compute_loss(args, model, gen, L: int) -> torch.Tensor:
    """One batch's loss, as each mode's users compute it."""
    if args.mode in ("pscan", "seq"):
        x = torch.randn(BATCH, L, D_MODEL, generator=gen)
        target = x[..., 0].cumsum(1) / torch.arange(1, L + 1)
        loss = F.mse_loss(model(x), target)
    elif args.mode == "lm":
        tokens = torch.randint(1, VOCAB, (BATCH, L + 1), generator=gen)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                               tokens[:, 1:].reshape(-1))
    elif args.mode == "step":
        tokens = torch.randint(1, VOCAB, (BATCH, L + 1), generator=gen)
        caches = [(None, torch.zeros(BATCH, model.config.d_inner,
                                     model.config.d_conv - 1))
                  for _ in range(model.config.n_layers)]
        loss = 0.0
        for t in range(L):
            logits, caches = model.step(tokens[:, t], caches)
            loss = loss + F.cross_entropy(logits, tokens[:, t + 1]) / L
    elif args.mode == "jamba":
        tokens = torch.randint(1, VOCAB, (BATCH, L + 1), generator=gen)
        logits, router_logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                               tokens[:, 1:].reshape(-1))
        loss = loss + 0.01 * load_balancing_loss(router_logits, model.config.num_experts,
                                                 model.config.num_experts_per_tok)
    else:
        patches = torch.randn(BATCH, L, 12, generator=gen)
        labels = torch.randint(0, 4, (BATCH,), generator=gen)
        loss = F.cross_entropy(model(patches), labels)
    return loss


def train_tbptt(args, model, opt, gen, L: int) -> None:
    """Truncated backpropagation through time over one long token stream: each step feeds
    the next L tokens through `model.step`, starting from the caches the previous chunk
    left, detached so that backward stops at the chunk's start."""
    stream = torch.randint(1, VOCAB, (BATCH, L * args.steps + 1), generator=gen)
    caches = [(None, torch.zeros(BATCH, model.config.d_inner, model.config.d_conv - 1))
              for _ in range(model.config.n_layers)]
    for step in range(args.steps):
        caches = [(h if h is None else h.detach(), inputs.detach()) for h, inputs in caches]
        loss = 0.0
        for t in range(step * L, (step + 1) * L):
            logits, caches = model.step(stream[:, t], caches)
            loss = loss + F.cross_entropy(logits, stream[:, t + 1]) / L
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")


def generate(model, input_ids: torch.Tensor, num_tokens: int, gen) -> None:
    """`LM.generate` without its tokenizer: the prompt, then `num_tokens` sampled tokens
    (top-k 8), one `model.step(token, caches)` per position under `no_grad`."""
    model.eval()
    caches = [(None, torch.zeros(1, model.config.d_inner, model.config.d_conv - 1))
              for _ in range(model.config.n_layers)]
    for i in range(input_ids.size(1) + num_tokens - 1):
        with torch.no_grad():
            next_token_logits, caches = model.step(input_ids[:, i], caches)
        if i + 1 >= input_ids.size(1):
            probs = F.softmax(next_token_logits, dim=-1)
            values, _ = torch.topk(probs, k=8)
            probs[probs < values[:, -1, None]] = 0
            next_token = torch.multinomial(probs / probs.sum(1, keepdim=True), 1, generator=gen)
            input_ids = torch.cat([input_ids, next_token], dim=1)
    print("generated", input_ids.tolist())


if __name__ == "__main__":
    main()
