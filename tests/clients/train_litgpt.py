"""A tiny litgpt model fine-tuned the way litgpt's own `litgpt finetune` scripts do it
(litgpt/finetune/lora.py, adapter_v2.py, full.py, 0.5.13): the model from a named config with
tiny overrides (`GPT.from_name(name, n_layer=..., ...)`, nothing downloaded), made under
`fabric.init_module`, frozen by litgpt's own `mark_only_*_as_trainable`, set up by
`fabric.setup_module` / `fabric.setup_optimizers`, litgpt's warmup-then-cosine schedule
(`finetune.lora.get_lr_scheduler`), random token batches padded by litgpt's SFT collate
(`data.base.get_sft_collate_fn`: labels -100 past each sample's end), the sanity check
`validate` runs before training, then `fit`'s step: `model(input_ids,
lm_head_chunk_size=...)`, the last chunk's final position cut off, litgpt's
`chunked_cross_entropy`, `fabric.backward(loss / accum)` under `fabric.no_backward_sync`,
an optimizer step every `--accum` micro-batches, `scheduler.step()`, the running loss in
torchmetrics' `RunningMean`.

    python tests/clients/train_litgpt.py --mode lora --steps 3
    memledger trace tests/clients/train_litgpt.py --steps 2 -o lit.ledger -- --config llama
    memledger compare tests/clients/train_litgpt.py -p 'checkpoint:transformer.h.*' -- --mode lora

- `--mode`: `full` (litgpt.model.GPT, every weight trained, as finetune/full.py), `lora`
  (litgpt.lora.GPT: LoRA on query, value and the MLP, `mark_only_lora_as_trainable`),
  `adapter` (litgpt.adapter.GPT: a 4-token prefix from the first layer on,
  `mark_only_adapter_as_trainable`), `adapter_v2` (litgpt.adapter_v2.GPT,
  `mark_only_adapter_v2_as_trainable`).
- `--config`: `pythia` (`pythia-14m`: GPT-NeoX, LayerNorm, parallel residual, partial
  rotary, GELU MLP), `llama` (`tiny-llama-1.1b`: RMSNorm, grouped-query attention,
  SwiGLU), `mixtral` (`Mixtral-8x7B-v0.1`: LLaMAMoE, top-2 of 4 experts), each cut to
  `--layers` layers of width `--width`.
- `--lm-head-chunk N`: `fit`'s `lm_head_chunk_size` (litgpt: 128); 0: whole logits.
- `--ce-chunk N`: `chunked_cross_entropy`'s `chunk_size` (litgpt: 128); 0: one call.
- `--accum N`: `gradient_accumulation_iters`. `--clip`: `fabric.clip_gradients(max_norm=1)`
  (pretrain.py's). `--precision`: Fabric's (`32-true`, `bf16-mixed`, `bf16-true`).
- `--lora-dropout P`: the LoRA branch's dropout (`litgpt finetune lora`'s default: 0.05).
- `--eval-interval K`: every K optimizer steps `fit`'s evaluation: `validate`, then
  `generate_example` (a KV cache for one sequence, `generate` of `--new-tokens` tokens
  from a random prompt, the cache cleared).
- `--config gemma` (`Gemma-2-2b`: soft-capping, a sliding window of 8, post-norms, scaled
  embeddings), `--config olmo2` (`OLMo-2-1124-7B`: query/key norms).

litgpt 0.5.13's Adapter (`--mode adapter`) keeps its prefix's keys and values from the
first call on (`adapter_kv_cache`, litgpt issue #1287): `validate`, under `no_grad`,
fills it, and `adapter_wte` never gets a gradient (`memledger doctor` reports it).
"""

import argparse

import lightning as L
import torch
from torch.utils.data import DataLoader
from torchmetrics import RunningMean

from litgpt.args import EvalArgs
from litgpt.data.base import get_sft_collate_fn
from litgpt.finetune.lora import get_lr_scheduler, validate
from litgpt.generate.base import generate
from litgpt.utils import CycleIterator, chunked_cross_entropy, num_parameters

CONFIGS = {"pythia": ("pythia-14m", {}),
           "llama": ("tiny-llama-1.1b", {"n_query_groups": 2}),
           "mixtral": ("Mixtral-8x7B-v0.1", {"n_query_groups": 2, "n_expert": 4,
                                             "n_expert_per_token": 2}),
           "gemma": ("Gemma-2-2b", {"n_query_groups": 2, "sliding_window_size": 8,
                                    "attention_scores_scalar": 8}),
           "olmo2": ("OLMo-2-1124-7B", {"n_query_groups": 4})}


def build(args):
    name, extra = CONFIGS[args.config]
    shape = dict(n_layer=args.layers, n_embd=args.width, n_head=4, head_size=args.width // 4,
                 block_size=args.seq_len, vocab_size=args.vocab, padded_vocab_size=args.vocab,
                 intermediate_size=2 * args.width, **extra)
    if args.mode == "lora":
        from litgpt.lora import GPT, mark_only_lora_as_trainable as freeze
        shape.update(lora_r=4, lora_alpha=8, lora_dropout=args.lora_dropout, lora_query=True,
                     lora_value=True, lora_mlp=True)
    elif args.mode == "adapter":
        from litgpt.adapter import GPT, mark_only_adapter_as_trainable as freeze
        shape.update(adapter_start_layer=0, adapter_prompt_length=4)
    elif args.mode == "adapter_v2":
        from litgpt.adapter_v2 import GPT, mark_only_adapter_v2_as_trainable as freeze
    else:
        from litgpt.model import GPT
        freeze = None
    model = GPT.from_name(name, **shape)
    if freeze is not None:
        freeze(model)
    return model


def samples(n: int, args, gen: torch.Generator) -> list[dict]:
    """SFT samples as litgpt's `SFTDataset` yields them: varying lengths, a masked prompt."""
    out = []
    for _ in range(n):
        length = int(torch.randint(args.seq_len // 2, args.seq_len + 1, (1,), generator=gen))
        ids = torch.randint(0, args.vocab, (length,), generator=gen)
        labels = ids.clone()
        labels[:3] = -100
        out.append({"input_ids": ids, "labels": labels,
                    "token_counts": {"raw": length - 3, "raw_plus_prompt_template": length}})
    return out


@torch.no_grad()
def generate_example(fabric, model, args, gen: torch.Generator) -> None:
    """finetune/lora.py's `generate_example`: a KV cache for one sequence, litgpt's
    `generate`, the cache cleared, back to training (a random prompt for the tokenizer's)."""
    encoded = torch.randint(0, args.vocab, (args.seq_len // 2,), generator=gen)
    model.eval()
    max_returned_tokens = len(encoded) + args.new_tokens
    if max_returned_tokens < model.max_seq_length:
        with fabric.init_tensor():
            model.set_kv_cache(batch_size=1)
        output = generate(model, encoded, max_returned_tokens=max_returned_tokens,
                          temperature=0.8)
        model.clear_kv_cache()
        model.train()
        fabric.print(output.tolist())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", choices=("full", "lora", "adapter", "adapter_v2"), default="full")
    p.add_argument("--config", choices=tuple(CONFIGS), default="pythia")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--lm-head-chunk", type=int, default=8)
    p.add_argument("--ce-chunk", type=int, default=128)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--precision", default="32-true")
    p.add_argument("--eval-interval", type=int, default=0)
    p.add_argument("--lora-dropout", type=float, default=0.0)   # litgpt finetune's: 0.05
    p.add_argument("--new-tokens", type=int, default=4)
    args = p.parse_args()

    fabric = L.Fabric(accelerator="cpu", devices=1, precision=args.precision)
    fabric.launch()
    fabric.seed_everything(1337)
    gen = torch.Generator().manual_seed(0)
    collate = get_sft_collate_fn(max_seq_length=args.seq_len)
    train_loader = DataLoader(samples(64, args, gen), batch_size=args.batch, shuffle=True,
                              collate_fn=collate, generator=gen)
    val_loader = DataLoader(samples(4, args, gen), batch_size=args.batch, collate_fn=collate)
    train_loader, val_loader = fabric.setup_dataloaders(train_loader, val_loader)

    with fabric.init_module(empty_init=False):
        model = build(args)
    fabric.print(f"trainable {num_parameters(model, requires_grad=True):,}, "
                 f"frozen {num_parameters(model, requires_grad=False):,}")
    model = fabric.setup_module(model)
    trainable = [q for q in model.parameters() if q.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=3e-4, weight_decay=0.02, betas=(0.9, 0.95))
    optimizer = fabric.setup_optimizers(optimizer)
    scheduler = get_lr_scheduler(optimizer, warmup_steps=2, max_steps=args.steps + 2)

    # fit(): the model's sequence length cut to the data's, then the sanity check
    model.max_seq_length = args.seq_len
    validate(fabric, model, val_loader, EvalArgs(max_iters=2), verbose=False)

    train_iterator = CycleIterator(train_loader)
    running_loss = RunningMean(window=args.accum, sync_on_compute=False).to(fabric.device)
    step_count, iter_num = 0, 0
    while step_count < args.steps:
        iter_num += 1
        batch = next(train_iterator)
        input_ids, targets = batch["input_ids"], batch["labels"]
        is_accumulating = iter_num % args.accum != 0
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            logits = model(input_ids, lm_head_chunk_size=args.lm_head_chunk)
            if isinstance(logits, list):
                logits[-1] = logits[-1][..., :-1, :]
            else:
                logits = logits[..., :-1, :]
            loss = chunked_cross_entropy(logits, targets[..., 1:], chunk_size=args.ce_chunk)
            fabric.backward(loss / args.accum)
        running_loss.update(loss.detach())
        if not is_accumulating:
            if args.clip:
                fabric.clip_gradients(model, optimizer, max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
            step_count += 1
            fabric.print(f"iter {iter_num} step {step_count} "
                         f"loss {running_loss.compute().item():.4f}")
            if args.eval_interval and step_count % args.eval_interval == 0:
                val_loss = validate(fabric, model, val_loader, EvalArgs(max_iters=2))
                generate_example(fabric, model, args, gen)
                fabric.print(f"val loss {val_loss.item():.4f}")


if __name__ == "__main__":
    main()
