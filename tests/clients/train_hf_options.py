"""transformers' `Trainer` and `Seq2SeqTrainer` with the TrainingArguments that change what a
step does, as fine-tuning scripts set them.

    python tests/clients/train_hf_options.py --accum 2 --smoothing 0.1 --steps 4
    memledger trace tests/clients/train_hf_options.py --steps 2 -o opt.ledger -- --accum 2
    memledger trace tests/clients/train_hf_options.py --steps 2 -- --model t5 --eval --generate
    memledger doctor tests/clients/train_hf_options.py -- --neftune 5 --optim adafactor

`--model` picks a tiny model built from its config (2 layers, width 64, vocab 128, nothing
downloaded): `gpt2` (causal LM under `Trainer`), `t5` or `bart` (encoder-decoder under
`Seq2SeqTrainer`: the model makes `decoder_input_ids` from the labels), `lora` (the GPT-2
under a peft LoRA on `c_attn`, activation (gradient) checkpointing with
`use_reentrant=False`, as QLoRA recipes set it). The options are TrainingArguments, each
named after its field: `--accum` (gradient_accumulation_steps: `--steps` counts optimizer
updates; `--train-size` examples per epoch, 64, so that an epoch's last update may have
fewer micro-batches), `--smoothing` (label_smoothing_factor), `--neftune`
(neftune_noise_alpha: a forward hook on the input embeddings adds noise in training),
`--optim`, `--sched` (lr_scheduler_type; `reduce_lr_on_plateau` needs `--eval`), `--eval`
(eval_strategy="steps" every step on `--eval-size` examples, 4, prediction_loss_only=False
and a `compute_metrics`, so the loop gathers the logits), `--eval-accum N`
(eval_accumulation_steps: the gathered logits go to numpy every N batches),
`--eval-on-start` (an evaluation before the first step), `--generate`
(predict_with_generate: the eval loop calls `generate`, with its KV cache; `--beams N`
its beam search), `--no-clip`
(max_grad_norm=0), `--empty-cache N` (torch_empty_cache_steps), `--bf16` (CPU
autocast); and `--sample N`, a callback that generates N tokens after each step. Seeded:
the same run every time.
"""

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import torch
import transformers
from transformers import (BartConfig, BartForConditionalGeneration, GPT2Config,
                          GPT2LMHeadModel, Seq2SeqTrainer, Seq2SeqTrainingArguments,
                          T5Config, T5ForConditionalGeneration, Trainer, TrainingArguments)

transformers.logging.set_verbosity_error()
VOCAB = 128


class RandomPairs(torch.utils.data.Dataset):
    """Random token ids; labels the ids themselves (causal LM) or a shorter target."""

    def __init__(self, n: int, seq: int, target: int, offset: int = 0) -> None:
        self.n, self.seq, self.target, self.offset = n, seq, target, offset

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(self.offset + i)
        ids = torch.randint(3, VOCAB, (self.seq,), generator=g)
        labels = ids if not self.target else torch.randint(3, VOCAB, (self.target,), generator=g)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def accuracy(pred) -> dict:
    """The metric most fine-tuning scripts pass: token accuracy, in numpy, as the docs show."""
    logits, labels = pred.predictions, pred.label_ids
    logits = logits[0] if isinstance(logits, tuple) else logits
    guess = logits if logits.ndim == labels.ndim else logits.argmax(-1)
    n = min(guess.shape[-1], labels.shape[-1])
    return {"accuracy": float((guess[..., :n] == labels[..., :n]).mean())}


class Samples(transformers.TrainerCallback):
    """What many fine-tuning scripts add: a look at what the model writes now, greedily,
    after each step (the model's own `generate`, its KV cache, EOS or N new tokens)."""

    def __init__(self, tokens: int, beams: int) -> None:
        self.tokens, self.beams = tokens, beams

    def on_step_end(self, args, state, control, model=None, **kwargs):
        prompt = torch.tensor([[5, 6, 7, 8]])
        if model.config.is_encoder_decoder:
            prompt = torch.arange(3, 3 + 8).unsqueeze(0)
        model.eval()
        with torch.no_grad():
            model.generate(prompt, attention_mask=torch.ones_like(prompt),
                           max_new_tokens=self.tokens, do_sample=False, num_beams=self.beams)
        model.train()


def build(name: str, seq: int):
    if name in ("gpt2", "lora"):
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB,
                                           n_positions=seq, bos_token_id=1, eos_token_id=2,
                                           pad_token_id=0))
        if name == "lora":
            from peft import LoraConfig, get_peft_model
            model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"],
                                                     lora_dropout=0.0, task_type="CAUSAL_LM"))
        return model
    if name == "t5":
        return T5ForConditionalGeneration(T5Config(
            vocab_size=VOCAB, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2,
            decoder_start_token_id=0, pad_token_id=0, eos_token_id=2))
    return BartForConditionalGeneration(BartConfig(
        vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["gpt2", "t5", "bart", "lora"], default="gpt2")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--train-size", type=int, default=64)
    p.add_argument("--smoothing", type=float, default=0.0)
    p.add_argument("--neftune", type=float, default=None)
    p.add_argument("--optim", default="adamw_torch")
    p.add_argument("--sched", default="linear")
    p.add_argument("--eval", action="store_true")
    p.add_argument("--eval-size", type=int, default=4)
    p.add_argument("--eval-accum", type=int, default=None)
    p.add_argument("--eval-on-start", action="store_true")
    p.add_argument("--generate", action="store_true")
    p.add_argument("--beams", type=int, default=1)
    p.add_argument("--no-clip", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--sample", type=int, default=0,
                   help="a callback generates N tokens greedily after each step")
    p.add_argument("--empty-cache", type=int, default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    seq2seq = args.model in ("t5", "bart")
    model = build(args.model, args.seq)
    target = args.seq // 2 if seq2seq else 0
    train = RandomPairs(args.train_size, args.seq, target)
    evals = RandomPairs(args.eval_size, args.seq, target, offset=1000) if args.eval else None
    arguments = Seq2SeqTrainingArguments if seq2seq else TrainingArguments
    extra = {"predict_with_generate": args.generate, "generation_max_length": target + 1,
             "generation_num_beams": args.beams} if seq2seq else {}
    with tempfile.TemporaryDirectory(prefix="hf-options-") as tmp:
        targs = arguments(
            output_dir=tmp, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=2, gradient_accumulation_steps=args.accum,
            label_smoothing_factor=args.smoothing, neftune_noise_alpha=args.neftune,
            optim=args.optim, lr_scheduler_type=args.sched, learning_rate=1e-3,
            eval_strategy="steps" if args.eval else "no", eval_steps=1,
            eval_accumulation_steps=args.eval_accum, eval_on_start=args.eval_on_start,
            prediction_loss_only=False, max_grad_norm=0.0 if args.no_clip else 1.0,
            torch_empty_cache_steps=args.empty_cache, bf16=args.bf16,
            activation_checkpointing=args.model == "lora",
            activation_checkpointing_kwargs={"use_reentrant": False},
            logging_steps=1_000, report_to=[], save_strategy="no", use_cpu=True,
            dataloader_num_workers=0, disable_tqdm=True, **extra)
        collate = None
        if seq2seq and args.smoothing:
            # the Trainer takes the labels out for its label smoother, so the model cannot
            # shift them: DataCollatorForSeq2Seq's `decoder_input_ids`, made here
            def collate(rows):
                batch = {k: torch.stack([r[k] for r in rows]) for k in rows[0]}
                batch["decoder_input_ids"] = model.prepare_decoder_input_ids_from_labels(
                    labels=batch["labels"])
                return batch
        trainer = (Seq2SeqTrainer if seq2seq else Trainer)(
            model=model, args=targs, train_dataset=train, eval_dataset=evals,
            data_collator=collate, callbacks=[Samples(args.sample, args.beams)] if args.sample else None,
            compute_metrics=accuracy if args.eval else None)
        trainer.train()


if __name__ == "__main__":
    main()
