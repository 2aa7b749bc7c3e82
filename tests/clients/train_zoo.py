"""Train transformers models of other shapes built from config (no download), dropout on:
an encoder-decoder (T5), a vision transformer (ViT), a speech encoder-decoder (Whisper),
decoder LMs (Mistral, GPT-NeoX, Falcon), a state-space model (Mamba), a convolutional net with BatchNorm (ResNet), and
peft adapters (LoRA, DoRA, IA3) on a Llama.

    python tests/clients/train_zoo.py --model t5 --steps 3
    python tests/clients/train_zoo.py --model vit --autocast bf16 --accum 2
    python tests/clients/train_zoo.py --model llama-dora --steps 3
    memledger compare tests/clients/train_zoo.py -p 'checkpoint:encoder.block.*' -- --model t5

Every model has the library's dropout (or --dropout where the config leaves it at 0), so a
policy must re-run the same masks. Inputs come from their own generator.
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import torch
import transformers

transformers.logging.set_verbosity_error()

H, FF, V, SEQ = 64, 128, 256, 16


def build(name: str, layers: int, p: float, cache: bool):
    t = transformers
    if name == "t5":
        return t.T5ForConditionalGeneration(t.T5Config(
            d_model=H, d_ff=FF, d_kv=32, num_layers=layers, num_decoder_layers=layers,
            num_heads=2, vocab_size=V, dropout_rate=p, use_cache=cache,
            decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))
    if name == "vit":
        return t.ViTForImageClassification(t.ViTConfig(
            hidden_size=H, num_hidden_layers=layers, num_attention_heads=2,
            intermediate_size=FF, image_size=32, patch_size=8, num_labels=10,
            hidden_dropout_prob=p, attention_probs_dropout_prob=p))
    if name == "whisper":
        return t.WhisperForConditionalGeneration(t.WhisperConfig(
            d_model=H, encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=FF, decoder_ffn_dim=FF, num_mel_bins=16,
            max_source_positions=16, max_target_positions=SEQ, vocab_size=V, dropout=p,
            attention_dropout=p, activation_dropout=p, use_cache=cache,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1))
    if name == "mistral":
        return t.MistralForCausalLM(t.MistralConfig(
            hidden_size=H, intermediate_size=FF, num_hidden_layers=layers,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=V,
            max_position_embeddings=SEQ, attention_dropout=p, use_cache=cache))
    if name == "gpt_neox":
        return t.GPTNeoXForCausalLM(t.GPTNeoXConfig(
            hidden_size=H, intermediate_size=FF, num_hidden_layers=layers,
            num_attention_heads=4, vocab_size=V, max_position_embeddings=SEQ,
            hidden_dropout=p, attention_dropout=p, use_cache=cache))
    if name == "falcon":
        return t.FalconForCausalLM(t.FalconConfig(
            hidden_size=H, num_hidden_layers=layers, num_attention_heads=4, vocab_size=V,
            hidden_dropout=p, attention_dropout=p, use_cache=cache))
    if name == "mamba":     # a state-space model: the sequential scan of the CPU path
        return t.MambaForCausalLM(t.MambaConfig(
            hidden_size=H, state_size=8, num_hidden_layers=layers, vocab_size=V,
            use_cache=cache))
    if name == "resnet":
        return t.ResNetForImageClassification(t.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10,
            num_channels=3))
    if name.startswith("llama-"):
        import peft
        base = t.LlamaForCausalLM(t.LlamaConfig(
            hidden_size=H, intermediate_size=FF, num_hidden_layers=layers,
            num_attention_heads=2, num_key_value_heads=2, vocab_size=V,
            max_position_embeddings=SEQ, attention_dropout=p, use_cache=cache))
        kind = name.split("-", 1)[1]
        if kind == "ia3":
            cfg = peft.IA3Config(target_modules=["k_proj", "v_proj", "down_proj"],
                                 feedforward_modules=["down_proj"], task_type="CAUSAL_LM")
        else:
            cfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=p, use_dora=kind == "dora",
                                  target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        return peft.get_peft_model(base, cfg)
    raise SystemExit(f"unknown --model {name!r}")


def batch(name: str, gen: torch.Generator, bsz: int) -> dict:
    ids = torch.randint(3, V, (bsz, SEQ), generator=gen)
    if name in ("vit", "resnet"):
        return {"pixel_values": torch.randn(bsz, 3, 32, 32, generator=gen),
                "labels": torch.randint(0, 10, (bsz,), generator=gen)}
    if name == "whisper":
        return {"input_features": torch.randn(bsz, 16, 32, generator=gen), "labels": ids}
    if name == "t5":
        return {"input_ids": ids, "labels": torch.randint(3, V, (bsz, SEQ // 2), generator=gen)}
    return {"input_ids": ids, "labels": ids}


def main() -> None:
    global SEQ
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="t5")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--cache", action="store_true", help="use_cache=True")
    p.add_argument("--autocast", choices=["bf16"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--grad-ckpt", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--seq", type=int, default=16)
    args = p.parse_args()
    SEQ = args.seq

    torch.manual_seed(0)
    model = build(args.model, args.layers, args.dropout, args.cache)
    if args.grad_ckpt:
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-3)
    fwd = torch.compile(model, backend="eager") if args.compile else model
    gen = torch.Generator().manual_seed(1234)
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16")
    for step in range(args.steps):
        for _ in range(args.accum):
            with amp:
                out = fwd(**batch(args.model, gen, args.batch_size))
            (out.loss / args.accum).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {out.loss.item():.4f}")


if __name__ == "__main__":
    main()
