"""Fine-tune a tiny Llama with Hugging Face TRL's own trainers: SFT, DPO, reward modelling.

    python tests/clients/train_trl.py --trainer dpo --steps 3
    memledger trace tests/clients/train_trl.py --steps 2 -o trl.ledger -- --trainer dpo

Nothing is downloaded: the model is built from a `LlamaConfig` (2 layers, hidden 64), the
tokenizer is a word-level `tokenizers` model built in code and wrapped as a
`PreTrainedTokenizerFast`, and the data sets are `datasets.Dataset.from_dict` in memory.
The loop is TRL's (transformers' Trainer underneath: accelerate's wrapped optimizer, its
own zero_grad and scheduler).

- `--trainer sft`: `SFTTrainer` on plain text (a language model loss over every token);
  `--packing`: shorter texts packed several to a row (BFD, `position_ids`).
- `--trainer dpo`: `DPOTrainer` with a policy and a separate reference model (a copy, built
  from the same config and seed); chosen and rejected are concatenated into one batch, the
  reference runs under `no_grad`.
- `--trainer dpo --lora`: `DPOTrainer` with `ref_model=None` and a peft `LoraConfig`: TRL
  wraps the model itself and computes the reference log-probs with the adapter disabled.
- `--trainer grpo`: `GRPOTrainer`, two completions per prompt generated inside each step
  (`generate` under no_grad, with a KV cache), a reward function in Python; `--lora
  --beta 0.1` adds the KL term against the model with its adapter disabled.
- `--trainer kto`: `KTOTrainer`, unpaired completions labelled desirable or not, with a
  reference model. `--trainer dpo --precompute`: the reference log-probs computed once,
  before training (`precompute_ref_log_probs=True`). `--accum K`: K micro-batches a step.
- `--trainer reward`: `RewardTrainer` on a sequence-classification head (1 label),
  chosen and rejected in one batch.

TRL's configs default to `gradient_checkpointing=True` and, where the CPU has it, `bf16`
(autocast): as a user gets them. `--no-grad-ckpt` turns the checkpointing off, so that
memledger's own policies over `model.layers.*` have layers to act on.
"""

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import torch
import transformers
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification,
                          PreTrainedTokenizerFast)

transformers.logging.set_verbosity_error()

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "log", "is", "was",
         "red", "blue", "big", "small", "and", "then", "it", "slept", "barked", "why", "how",
         "what", "yes", "no", "good", "bad"]


def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "<unk>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>")


def sentence(i: int, n: int) -> str:
    g = torch.Generator().manual_seed(i)
    return " ".join(WORDS[j] for j in torch.randint(0, len(WORDS), (n,), generator=g).tolist())


def preferences(n: int, seq: int) -> Dataset:
    return Dataset.from_dict({
        "prompt": [sentence(3 * i, seq // 2) for i in range(n)],
        "chosen": [" " + sentence(3 * i + 1, seq // 4 + i % 3) for i in range(n)],
        "rejected": [" " + sentence(3 * i + 2, seq // 4 + (i + 1) % 3) for i in range(n)],
    })


def config(args, vocab: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                       num_hidden_layers=args.layers, num_attention_heads=2,
                       num_key_value_heads=2, max_position_embeddings=4 * args.seq,
                       pad_token_id=0, eos_token_id=1, bos_token_id=1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trainer", choices=["sft", "dpo", "reward", "grpo", "kto"], default="dpo")
    p.add_argument("--lora", action="store_true", help="dpo, grpo: a peft LoraConfig (dpo: ref_model=None)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--beta", type=float, default=0.0, help="grpo: KL weight (> 0 with --lora: the adapter disabled is the reference)")
    p.add_argument("--precompute", action="store_true",
                   help="dpo: precompute_ref_log_probs=True (the reference runs before training)")
    p.add_argument("--packing", action="store_true", help="sft: packing=True (BFD, position_ids)")
    p.add_argument("--accum", type=int, default=1, help="gradient_accumulation_steps")
    p.add_argument("--no-grad-ckpt", action="store_true",
                   help="gradient_checkpointing=False (TRL's configs default it to True)")
    args = p.parse_args()

    def lora():
        if not args.lora:
            return None
        from peft import LoraConfig
        return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                          lora_dropout=0.0, task_type="CAUSAL_LM")
    tok = tokenizer()
    n = 4 * args.batch_size * args.steps * args.accum
    common = dict(max_steps=args.steps, per_device_train_batch_size=args.batch_size,
                  logging_steps=1_000, report_to=[], save_strategy="no", use_cpu=True,
                  dataloader_num_workers=0, disable_tqdm=True, seed=0,
                  gradient_checkpointing=not args.no_grad_ckpt,
                  gradient_accumulation_steps=args.accum)
    with tempfile.TemporaryDirectory(prefix="trl-") as out:
        torch.manual_seed(0)
        if args.trainer == "sft":
            from trl import SFTConfig, SFTTrainer
            # packed: texts of 3 to 9 words, several to a row of `--seq` tokens
            lengths = [3 + i % 7 if args.packing else args.seq for i in range(n)]
            data = Dataset.from_dict({"text": [sentence(i, k) for i, k in enumerate(lengths)]})
            trainer = SFTTrainer(model=LlamaForCausalLM(config(args, len(tok))),
                                 args=SFTConfig(output_dir=out, max_length=args.seq,
                                                packing=args.packing, **common),
                                 train_dataset=data, processing_class=tok)
        elif args.trainer == "dpo":
            from trl import DPOConfig, DPOTrainer
            model = LlamaForCausalLM(config(args, len(tok)))
            ref, peft_config = None, lora()
            if not args.lora:
                torch.manual_seed(0)
                ref = LlamaForCausalLM(config(args, len(tok)))
            trainer = DPOTrainer(model=model, ref_model=ref,
                                 args=DPOConfig(output_dir=out, max_length=args.seq,
                                                precompute_ref_log_probs=args.precompute,
                                                **common),
                                 train_dataset=preferences(n, args.seq), processing_class=tok,
                                 peft_config=peft_config)
        elif args.trainer == "grpo":
            from trl import GRPOConfig, GRPOTrainer

            def good_words(completions, **kw) -> list[float]:
                return [float(c.split().count("good") - c.split().count("bad"))
                        for c in completions]

            data = Dataset.from_dict({"prompt": [sentence(i, args.seq // 2) for i in range(n)]})
            cfg = GRPOConfig(output_dir=out, num_generations=2, max_completion_length=args.seq // 2,
                             beta=args.beta, **common)
            trainer = GRPOTrainer(model=LlamaForCausalLM(config(args, len(tok))),
                                  reward_funcs=good_words, args=cfg, train_dataset=data,
                                  processing_class=tok, peft_config=lora())
        elif args.trainer == "kto":
            from trl import KTOConfig, KTOTrainer
            pairs = preferences(n, args.seq)
            data = Dataset.from_dict({"prompt": pairs["prompt"],
                                      "completion": [c if i % 2 else r for i, (c, r) in enumerate(
                                          zip(pairs["chosen"], pairs["rejected"]))],
                                      "label": [bool(i % 2) for i in range(n)]})
            torch.manual_seed(0)
            model = LlamaForCausalLM(config(args, len(tok)))
            torch.manual_seed(0)
            trainer = KTOTrainer(model=model, ref_model=LlamaForCausalLM(config(args, len(tok))),
                                 args=KTOConfig(output_dir=out, max_length=args.seq, **common),
                                 train_dataset=data, processing_class=tok)
        else:
            from trl import RewardConfig, RewardTrainer
            model = LlamaForSequenceClassification(config(args, len(tok)).__class__(
                **{**config(args, len(tok)).to_dict(), "num_labels": 1}))
            trainer = RewardTrainer(model=model,
                                    args=RewardConfig(output_dir=out, max_length=args.seq, **common),
                                    train_dataset=preferences(n, args.seq), processing_class=tok)
        trainer.train()


if __name__ == "__main__":
    main()
