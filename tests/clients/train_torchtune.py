"""A tiny Llama-3 decoder fine-tuned the way torchtune's recipes do it
(recipes/full_finetune_single_device.py, recipes/lora_finetune_single_device.py, 0.6.1):
the model from torchtune's component builders (`llama3`, `lora_llama3`), random tokens
(seeded), labels shifted against the recipe's `ignore_labels_cache`, the loss scaled by the
number of tokens and the gradients scaled back (`training.scale_grads`), gradient
clipping, `zero_grad(set_to_none=True)`. Tiny, nothing downloaded.

    python tests/clients/train_torchtune.py --steps 3 --lora --chunks 4
    memledger trace tests/clients/train_torchtune.py --steps 2 -o tt.ledger -- --ac
    memledger compare tests/clients/train_torchtune.py -p 'checkpoint:layers.*' --steps 2

Options, each one of the recipes' config keys:

- `--lora`: `lora_llama3(lora_attn_modules=["q_proj", "v_proj"], ...)` with
  `set_trainable_params(model, get_adapter_params(model))` freezing all but the adapters
  (the LoRA recipe); `--dora`: `use_dora=True`; `--qlora`: `quantize_base=True` (as
  `qlora_llama3` builds it: the adapted projections' frozen base weights in torchao's NF4).
- `--ac`: `enable_activation_checkpointing`: `training.set_activation_checkpointing(model,
  auto_wrap_policy={TransformerSelfAttentionLayer})`.
- `--chunks N`: `CEWithChunkedOutputLoss(num_output_chunks=N)` and
  `model.set_num_output_chunks(N)`: the decoder returns its logits as N chunks of the
  sequence, the loss upcasts and scores them one at a time. 0: `nn.CrossEntropyLoss`
  over the whole (flattened) logits.
- `--accum N`: `gradient_accumulation_steps`.
- `--opt-in-bwd`: `optimizer_in_bwd`: one optimizer per parameter stepped by
  `training.register_optim_in_bwd_hooks` as its gradient is accumulated (no clipping,
  no accumulation, as the recipe requires).
- `--log-every N`: `log_every_n_steps` (the loss read with `.item()`); 0: never (for
  `trace --fake`, which has no values to read).
"""

import argparse

import torch
from torch import nn

from torchtune import modules, training
from torchtune.models.llama3 import llama3, lora_llama3
from torchtune.modules.loss import CEWithChunkedOutputLoss
from torchtune.modules.peft import get_adapter_params, set_trainable_params

IGNORE = -100


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--lora", action="store_true")
    p.add_argument("--dora", action="store_true")
    p.add_argument("--qlora", action="store_true")
    p.add_argument("--ac", action="store_true")
    p.add_argument("--chunks", type=int, default=0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--opt-in-bwd", action="store_true")
    p.add_argument("--log-every", type=int, default=1)   # log_every_n_steps; 0: never
    args = p.parse_args()
    torch.manual_seed(0)

    shape = dict(vocab_size=args.vocab, num_layers=args.layers, num_heads=args.heads,
                 num_kv_heads=args.kv_heads, embed_dim=args.dim, max_seq_len=args.seq_len)
    if args.lora or args.dora or args.qlora:
        model = lora_llama3(lora_attn_modules=["q_proj", "v_proj"], lora_rank=4,
                            lora_alpha=8.0, use_dora=args.dora, quantize_base=args.qlora,
                            **shape)
        set_trainable_params(model, get_adapter_params(model))
        for m in model.modules():   # the recipe, once the base weights are in: DoRA's
            if hasattr(m, "initialize_dora_magnitude"):   # magnitude is `torch.empty`
                m.initialize_dora_magnitude()             # until then
    else:
        model = llama3(**shape)
    if args.ac:
        training.set_activation_checkpointing(
            model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})

    if args.chunks:
        loss_fn = CEWithChunkedOutputLoss(num_output_chunks=args.chunks)
        model.set_num_output_chunks(loss_fn.num_output_chunks)
    else:
        loss_fn = nn.CrossEntropyLoss(ignore_index=IGNORE)
    trainable = [q for q in model.parameters() if q.requires_grad]
    if args.opt_in_bwd:
        optim_dict = {q: torch.optim.AdamW([q], lr=2e-5) for q in trainable}
        training.register_optim_in_bwd_hooks(model, optim_dict)
        optimizer = None
    else:
        optimizer = torch.optim.AdamW(trainable, lr=2e-5)
    ignore_labels_cache = torch.full((args.batch, 1), IGNORE)

    model.train()
    for step in range(args.steps):
        running_loss, num_tokens = 0.0, 0
        for _ in range(1 if args.opt_in_bwd else args.accum):
            tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len))
            labels = tokens.clone()
            labels[:, :4] = IGNORE             # a "prompt" masked out of the loss
            current_num_tokens = (labels != IGNORE).sum()
            num_tokens += current_num_tokens
            logits = model(tokens)
            labels = torch.hstack((labels[..., 1:], ignore_labels_cache[: labels.shape[0]]))
            if not isinstance(logits, list):
                labels = labels.reshape(-1)
                logits = logits.reshape(-1, logits.size(-1))
            current_loss = loss_fn(logits, labels) * current_num_tokens
            del logits
            running_loss += current_loss
            current_loss.backward()
        if optimizer is not None:
            training.scale_grads(model, 1 / num_tokens)
            torch.nn.utils.clip_grad_norm_(trainable, max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if args.log_every and step % args.log_every == 0:
            loss_to_log = running_loss.item() / num_tokens
            print(f"step {step}  loss {loss_to_log:.4f}")


if __name__ == "__main__":
    main()
