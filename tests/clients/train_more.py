"""transformers models of other families, built from config (no download): Mixtral (MoE,
router aux loss), Qwen2 (tied embeddings), Gemma2 (sliding window), BART, GPT-2.
docs/accuracy.md, "MoE, parametrizations, TorchScript, RNNs".

    memledger compare tests/clients/train_more.py -p 'checkpoint:model.layers.*' -- --model mixtral
"""
import argparse, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch, transformers
transformers.logging.set_verbosity_error()
H, FF, V, SEQ = 64, 128, 256, 16

def build(name, layers):
    t = transformers
    if name == "mixtral":
        return t.MixtralForCausalLM(t.MixtralConfig(hidden_size=H, intermediate_size=FF,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, vocab_size=V,
            max_position_embeddings=SEQ, num_local_experts=4, num_experts_per_tok=2,
            use_cache=False, output_router_logits=True))
    if name == "qwen2":
        return t.Qwen2ForCausalLM(t.Qwen2Config(hidden_size=H, intermediate_size=FF,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=V, max_position_embeddings=SEQ, use_cache=False, tie_word_embeddings=True))
    if name == "gemma2":
        return t.Gemma2ForCausalLM(t.Gemma2Config(hidden_size=H, intermediate_size=FF,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            vocab_size=V, max_position_embeddings=SEQ, sliding_window=8, use_cache=False))
    if name == "bart":
        return t.BartForConditionalGeneration(t.BartConfig(d_model=H, encoder_layers=layers,
            decoder_layers=layers, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=FF, decoder_ffn_dim=FF, vocab_size=V, max_position_embeddings=SEQ,
            dropout=0.1, use_cache=False))
    if name == "gpt2":
        return t.GPT2LMHeadModel(t.GPT2Config(n_embd=H, n_layer=layers, n_head=4, vocab_size=V,
            n_positions=SEQ, use_cache=False))
    raise SystemExit(name)

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="mixtral"); ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--steps", type=int, default=3); ap.add_argument("--batch", type=int, default=4)
a = ap.parse_args()
torch.manual_seed(0)
model = build(a.model, a.layers)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
for step in range(a.steps):
    ids = torch.randint(2, V, (a.batch, SEQ), generator=g)
    out = model(input_ids=ids, labels=ids)
    loss = out.loss
    if getattr(out, "aux_loss", None) is not None:
        loss = loss + 0.01 * out.aux_loss
    loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
