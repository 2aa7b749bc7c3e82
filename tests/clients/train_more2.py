"""transformers models with their own backward or two towers, built from config (no
download), under loops users write: Reformer (reversible layers: a custom autograd Function
that re-makes each layer's input in backward, chunked feed-forward), CLIP (a text and a vision
tower, contrastive loss), XLNet (two attention streams), Mamba2 (the pure-torch scan), wav2vec2
(`--grad-ckpt`: its own checkpointing), peft AdaLoRA (`update_and_allocate` every step),
prompt and prefix tuning on GPT-2; and loops with an EMA copy of the
model (`torch.optim.swa_utils.AveragedModel`), two parameter groups with different weight
decay, an LR scheduler, `zero_grad(set_to_none=False)`, gradient clipping, and accelerate's
`accumulate()`,
`torch.func.functional_call` with `loss.backward()`. docs/accuracy.md, "Reversible layers, two towers, EMA loops".

    python tests/clients/train_more2.py --model reformer --steps 3
    memledger compare tests/clients/train_more2.py -p 'checkpoint:clip.text_model.encoder.layers.*' -- --model clip
    memledger doctor tests/clients/train_more2.py -- --model gpt2 --loop ema
"""
import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import torch
import transformers

transformers.logging.set_verbosity_error()

H, FF, V, SEQ = 64, 128, 256, 16


def build(name: str, layers: int):
    t = transformers
    if name == "reformer":
        # "lsh" and "local" layers alternate; reversible residuals (ReformerModel's
        # _ReversibleFunction) need an even number of layers' halves
        return t.ReformerModelWithLMHead(t.ReformerConfig(
            hidden_size=H, feed_forward_size=FF, attention_head_size=16, num_attention_heads=2,
            attn_layers=["local", "lsh"][:layers] * max(1, layers // 2), vocab_size=V,
            axial_pos_embds=False, max_position_embeddings=SEQ, local_attn_chunk_length=8,
            lsh_attn_chunk_length=8, num_buckets=2, num_hashes=1, chunk_size_feed_forward=8,
            is_decoder=True, hidden_dropout_prob=0.1, lsh_attention_probs_dropout_prob=0.0,
            local_attention_probs_dropout_prob=0.1, pad_token_id=0, eos_token_id=1))
    if name == "clip":
        return t.CLIPModel(t.CLIPConfig(
            text_config=dict(hidden_size=H, intermediate_size=FF, num_hidden_layers=layers,
                             num_attention_heads=2, vocab_size=V, max_position_embeddings=SEQ,
                             projection_dim=32),
            vision_config=dict(hidden_size=H, intermediate_size=FF, num_hidden_layers=layers,
                               num_attention_heads=2, image_size=32, patch_size=8,
                               projection_dim=32),
            projection_dim=32))
    if name == "xlnet":
        return t.XLNetLMHeadModel(t.XLNetConfig(
            d_model=H, n_layer=layers, n_head=2, d_inner=FF, vocab_size=V, dropout=0.1,
            use_mems_train=False, mem_len=None))
    if name == "bigbird":   # block-sparse attention (seq 64 = 8 blocks of 8)
        return t.BigBirdForMaskedLM(t.BigBirdConfig(
            hidden_size=H, num_hidden_layers=layers, num_attention_heads=2,
            intermediate_size=FF, vocab_size=V, max_position_embeddings=64,
            attention_type="block_sparse", block_size=8, num_random_blocks=2,
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1))
    if name == "mamba2":
        return t.Mamba2ForCausalLM(t.Mamba2Config(
            hidden_size=H, num_hidden_layers=layers, vocab_size=V, num_heads=4, head_dim=32,
            state_size=16, n_groups=1, expand=2, chunk_size=8, use_cache=False))
    if name == "wav2vec2":
        return t.Wav2Vec2ForCTC(t.Wav2Vec2Config(
            hidden_size=H, num_hidden_layers=layers, num_attention_heads=2,
            intermediate_size=FF, conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, vocab_size=32,
            hidden_dropout=0.1, activation_dropout=0.1, attention_dropout=0.1,
            feat_proj_dropout=0.1, mask_time_prob=0.0, layerdrop=0.0, pad_token_id=0,
            ctc_loss_reduction="mean"))
    if name in ("adalora", "prompt", "prefix"):
        import peft
        base = build("gpt2", layers)
        if name == "adalora":
            cfg = peft.AdaLoraConfig(init_r=8, target_r=4, tinit=1, tfinal=1, deltaT=1,
                                     total_step=8, target_modules=["c_attn", "c_fc"],
                                     lora_dropout=0.1)
        elif name == "prompt":
            cfg = peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)
        else:
            cfg = peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)
        return peft.get_peft_model(base, cfg)
    if name == "gpt2":
        return t.GPT2LMHeadModel(t.GPT2Config(n_embd=H, n_layer=layers, n_head=4, vocab_size=V,
                                              n_positions=2 * SEQ, use_cache=False))
    raise SystemExit(f"unknown model {name!r}")


def loss_of(name, model, batch, g, functional=False):
    if name == "wav2vec2":
        audio = torch.randn(batch, 800, generator=g)      # 800 samples -> 79 frames
        labels = torch.randint(1, 32, (batch, 8), generator=g)
        return model(input_values=audio, labels=labels).loss
    ids = torch.randint(2, V, (batch, 64 if name == "bigbird" else SEQ), generator=g)
    if functional:   # the model's own parameters, handed in by name
        params = dict(model.named_parameters()) | dict(model.named_buffers())
        return torch.func.functional_call(model, params, (), {"input_ids": ids,
                                                              "labels": ids}).loss
    if name == "clip":
        pixels = torch.randn(batch, 3, 32, 32, generator=g)
        return model(input_ids=ids, pixel_values=pixels, return_loss=True).loss
    return model(input_ids=ids, labels=ids).loss


ap = argparse.ArgumentParser()
ap.add_argument("--model", default="reformer")
ap.add_argument("--loop", default="plain", choices=["plain", "ema", "groups", "accelerate",
                                                     "accelerate-bf16", "functional"])
ap.add_argument("--grad-ckpt", action="store_true", help="the model's own checkpointing")
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--batch", type=int, default=4)
a = ap.parse_args()
torch.manual_seed(0)
model = build(a.model, a.layers)
if a.grad_ckpt:
    model.gradient_checkpointing_enable()
model.train()
g = torch.Generator().manual_seed(1)

if a.loop == "groups":
    # no weight decay on biases and norms, as most fine-tuning scripts do
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
else:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
ema = torch.optim.swa_utils.AveragedModel(
    model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.99)) \
    if a.loop == "ema" else None

if a.loop.startswith("accelerate"):
    from accelerate import Accelerator
    acc = Accelerator(gradient_accumulation_steps=2, cpu=True,   # bf16: autocast on CPU
                      mixed_precision="bf16" if a.loop.endswith("bf16") else "no")
    model, opt = acc.prepare(model, opt)
    for step in range(a.steps):
        for micro in range(2):
            with acc.accumulate(model):
                loss = loss_of(a.model, model, a.batch, g)
                acc.backward(loss)
                if acc.sync_gradients:
                    acc.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")
else:
    for step in range(a.steps):
        loss = loss_of(a.model, model, a.batch, g, functional=a.loop == "functional")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if a.model == "adalora":   # AdaLoRA's loop: prune the ranks before zero_grad
            model.base_model.update_and_allocate(step)
        sched.step()
        opt.zero_grad(set_to_none=(a.loop != "groups"))
        if ema is not None:
            ema.update_parameters(model)
        print(f"step {step} loss {loss.item():.4f}")
