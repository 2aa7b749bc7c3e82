"""transformers and peft families with mechanics the other clients lack, built from config (no
download): DeBERTa-v2 (relative-position attention, its own autograd Functions), Longformer
(sliding chunks through `as_strided`, global attention), Funnel (pooling between blocks),
SwitchTransformers (top-1 MoE with its router losses), Swin (windows, `roll`, drop path),
ConvNeXt (drop path, layer scale), Perceiver (latents), ELECTRA, ModernBERT (unpadding);
peft LoHa, LoKr, OFT, BOFT, VeRA, FourierFT (complex FFT), LN tuning on GPT-2, and LoRA on a
model that checkpoints itself (`--grad-ckpt`).

    python tests/clients/train_more3.py --model deberta --steps 3
    memledger trace tests/clients/train_more3.py --steps 3 -o d.ledger -- --model deberta
    memledger predict d.ledger -p 'checkpoint:deberta.encoder.layer.*'
"""
import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import torch
import transformers

transformers.logging.set_verbosity_error()

H, FF, V, SEQ = 64, 128, 256, 32
VISION = ("swin", "convnext", "mobilevit")


def build(name: str, layers: int):
    t = transformers
    common = dict(hidden_size=H, num_hidden_layers=layers, num_attention_heads=2,
                  intermediate_size=FF, vocab_size=V)
    if name == "deberta":
        return t.DebertaV2ForMaskedLM(t.DebertaV2Config(
            **common, max_position_embeddings=SEQ, relative_attention=True,
            position_buckets=16, max_relative_positions=SEQ, pos_att_type=["p2c", "c2p"],
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1))
    if name == "longformer":
        return t.LongformerForMaskedLM(t.LongformerConfig(
            **common, max_position_embeddings=SEQ + 2, attention_window=[8] * layers,
            pad_token_id=1, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1))
    if name == "funnel":
        return t.FunnelForMaskedLM(t.FunnelConfig(
            vocab_size=V, block_sizes=[1] * layers, d_model=H, n_head=2, d_head=32,
            d_inner=FF, num_decoder_layers=1, hidden_dropout=0.1, attention_dropout=0.1))
    if name == "switch":
        return t.SwitchTransformersForConditionalGeneration(t.SwitchTransformersConfig(
            vocab_size=V, d_model=H, d_kv=16, d_ff=FF, num_layers=layers,
            num_decoder_layers=layers, num_heads=2, num_experts=4, expert_capacity=16,
            num_sparse_encoder_layers=1, num_sparse_decoder_layers=1, dropout_rate=0.1,
            router_jitter_noise=0.01,
            use_cache=False, decoder_start_token_id=0, pad_token_id=0))
    if name == "swin":
        return t.SwinForImageClassification(t.SwinConfig(
            image_size=32, patch_size=4, embed_dim=16, depths=[layers, layers],
            num_heads=[2, 2], window_size=4, drop_path_rate=0.1, num_labels=10))
    if name == "convnext":
        return t.ConvNextForImageClassification(t.ConvNextConfig(
            num_channels=3, num_stages=2, hidden_sizes=[16, 32], depths=[layers, layers],
            patch_size=4,
            image_size=32, drop_path_rate=0.1, num_labels=10))
    if name == "mobilevit":
        return t.MobileViTForImageClassification(t.MobileViTConfig(
            image_size=32, patch_size=2, hidden_sizes=[16, 24, 32],
            neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 48], num_attention_heads=2,
            num_labels=10))
    if name == "perceiver":
        return t.PerceiverForMaskedLM(t.PerceiverConfig(
            num_latents=16, d_latents=H, d_model=H, num_blocks=1,
            num_self_attends_per_block=layers, num_self_attention_heads=2,
            num_cross_attention_heads=1, vocab_size=V, max_position_embeddings=SEQ))
    if name == "electra":
        return t.ElectraForPreTraining(t.ElectraConfig(
            **common, embedding_size=32, max_position_embeddings=SEQ))
    if name == "distilbert":
        return t.DistilBertForMaskedLM(t.DistilBertConfig(
            vocab_size=V, dim=H, n_layers=layers, n_heads=2, hidden_dim=FF,
            max_position_embeddings=SEQ))
    if name == "modernbert":
        return t.ModernBertForMaskedLM(t.ModernBertConfig(
            **common, max_position_embeddings=SEQ, global_attn_every_n_layers=2,
            local_attention=8, pad_token_id=0))
    if name == "sewd":   # DeBERTa's XSoftmax / XDropout: autograd Functions of its own
        return t.SEWDForCTC(t.SEWDConfig(
            **dict(common, vocab_size=32), conv_dim=(32, 32), conv_stride=(5, 2),
            conv_kernel=(10, 3), conv_bias=True, num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4, squeeze_factor=2, max_position_embeddings=64,
            position_buckets=16, hidden_dropout=0.1, attention_dropout=0.1,
            activation_dropout=0.1, feat_proj_dropout=0.1, mask_time_prob=0.0, layerdrop=0.0,
            pad_token_id=0, ctc_loss_reduction="mean"))
    if name == "phimoe":   # sparsemixer routing through PhimoeMultiplier (autograd Function)
        return t.PhimoeForCausalLM(t.PhimoeConfig(
            **common, num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2,
            max_position_embeddings=SEQ, use_cache=False))
    if name == "llama":
        return t.LlamaForCausalLM(t.LlamaConfig(
            **common, num_key_value_heads=1, max_position_embeddings=SEQ, use_cache=False))
    if name == "gpt2":
        return t.GPT2LMHeadModel(t.GPT2Config(n_embd=H, n_layer=layers, n_head=2,
                                              vocab_size=V, n_positions=SEQ, use_cache=False))
    import peft
    # LyCORIS and OFT adapters take nn.Linear, which GPT-2's Conv1D is not: Llama
    base = build("gpt2" if name in ("vera", "fourierft", "lntuning", "lora-ckpt")
                 else "llama", layers)
    if name == "lora-ckpt":   # the library's own checkpointing under the adapters
        base.gradient_checkpointing_enable()
        base.enable_input_require_grads()
    cfg = {
        "loha": lambda: peft.LoHaConfig(r=4, target_modules=["q_proj", "v_proj"],
                                        module_dropout=0.1, rank_dropout=0.1),
        "lokr": lambda: peft.LoKrConfig(r=4, target_modules=["q_proj", "v_proj"]),
        "oft": lambda: peft.OFTConfig(r=0, oft_block_size=16, target_modules=["up_proj"]),
        "boft": lambda: peft.BOFTConfig(boft_block_size=8, target_modules=["up_proj"],
                                        boft_dropout=0.1),
        "vera": lambda: peft.VeraConfig(r=8, target_modules=["c_fc"], vera_dropout=0.1),
        "fourierft": lambda: peft.FourierFTConfig(n_frequency=32, target_modules=["c_fc"]),
        "lntuning": lambda: peft.LNTuningConfig(target_modules=["ln_1", "ln_2"]),
        "lora-ckpt": lambda: peft.LoraConfig(r=4, target_modules=["c_attn"],
                                             lora_dropout=0.1),
    }.get(name)
    if cfg is None:
        raise SystemExit(f"unknown model {name!r}")
    return peft.get_peft_model(base, cfg())


def loss_of(name, model, batch, g):
    if name == "sewd":
        audio = torch.randn(batch, 800, generator=g)      # 800 samples -> 79 frames
        return model(input_values=audio,
                     labels=torch.randint(1, 32, (batch, 8), generator=g)).loss
    if name in VISION:
        pixels = torch.randn(batch, 3, 32, 32, generator=g)
        return model(pixel_values=pixels, labels=torch.randint(0, 10, (batch,),
                                                               generator=g)).loss
    ids = torch.randint(2, V, (batch, SEQ), generator=g)
    if name == "switch":
        # the router's z-loss and load-balancing loss join the loss
        return model(input_ids=ids, labels=ids[:, :8].contiguous(),
                     output_router_logits=True).loss
    if name == "electra":
        return model(input_ids=ids, labels=(ids % 2)).loss
    if name == "longformer":
        glob = torch.zeros_like(ids)
        glob[:, 0] = 1
        return model(input_ids=ids, global_attention_mask=glob, labels=ids).loss
    if name == "modernbert":   # padded rows: the model unpads them
        mask = torch.ones_like(ids)
        mask[0, SEQ // 2:] = 0
        return model(input_ids=ids, attention_mask=mask, labels=ids).loss
    if name == "funnel":   # its upsampled residual all but copies the input: predict the next
        return model(input_ids=ids, labels=ids.roll(1, 1)).loss
    return model(input_ids=ids, labels=ids).loss


ap = argparse.ArgumentParser()
ap.add_argument("--model", default="deberta")
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--batch", type=int, default=2)
a = ap.parse_args()
torch.manual_seed(0)
model = build(a.model, a.layers)
model.train()
g = torch.Generator().manual_seed(1)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for step in range(a.steps):
    loss = loss_of(a.model, model, a.batch, g)
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.4f}")
