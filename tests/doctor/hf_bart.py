"""A transformers BART loop, tiny and built from a config (no downloads). BART drops only
with `nn.functional.dropout(h, p, training=self.training)` (no nn.Dropout module), so the
model left in eval mode once read "no findings".

    python hf_bart.py           # model.train(): no finding
    python hf_bart.py --eval    # the model in eval mode while it trains: eval_mode
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from transformers import BartConfig, BartForConditionalGeneration

torch.manual_seed(0)
cfg = BartConfig(vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1,
                 encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                 decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.1,
                 attention_dropout=0.1)
model = BartForConditionalGeneration(cfg)
model.train("--eval" not in sys.argv)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    ids = torch.randint(4, 64, (2, 12))
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad()
