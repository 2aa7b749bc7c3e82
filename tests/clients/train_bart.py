"""BART for conditional generation built from a config (transformers, no download), trained
on random token pairs with AdamW: an encoder stack and a decoder stack of different layer
classes (BartEncoderLayer, BartDecoderLayer).

    memledger trace tests/clients/train_bart.py -o b.ledger
    memledger plan b.ledger --budget 60%
"""
import argparse

import torch
from transformers import BartConfig, BartForConditionalGeneration

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
p.add_argument("--dim", type=int, default=64)
ARGS = p.parse_args()

torch.manual_seed(0)
cfg = BartConfig(vocab_size=256, d_model=ARGS.dim, encoder_layers=ARGS.layers,
                 decoder_layers=ARGS.layers, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=2 * ARGS.dim,
                 decoder_ffn_dim=2 * ARGS.dim, max_position_embeddings=128, use_cache=False)
model = BartForConditionalGeneration(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(ARGS.steps):
    src, tgt = torch.randint(4, 256, (4, 48)), torch.randint(4, 256, (4, 32))
    out = model(input_ids=src, labels=tgt)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
