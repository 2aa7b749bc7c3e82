"""chronos-forecasting (amazon-science/chronos-forecasting) fine-tuned the way its users do,
every model built from a config (nothing downloaded):

  bolt     `ChronosBoltModelForForecasting(T5Config(..., chronos_config=...))`: instance
           normalisation, patching, a residual patch embedding, a T5 encoder-decoder (one
           decoder token), the quantile loss the model computes itself from `target=`;
           a plain AdamW loop on random series
  chronos2 `Chronos2Model(Chronos2CoreConfig(..., chronos_config=...))`: time self-attention
           with RoPE, group attention across the batch (`group_ids`), future patches in the
           encoder, its own quantile loss from `future_target=`; `--trainer` runs it under
           `Chronos2Trainer` (the library's HF `Trainer`, which `Chronos2Pipeline.fit` uses,
           fed batches by the data set itself), otherwise a plain AdamW loop
  fit      `Chronos2Pipeline(model).fit(...)` as its users call it: a copy of the model,
           `Chronos2Dataset`'s random windows, `Chronos2Trainer`; `--lora` (peft, its
           default targets), `--covariates` (past-only and known-future covariates)
           (`--mode bolt --trainer`: Chronos-Bolt under the same Trainer, as AutoGluon's
           fine-tuning runs it)
  chronos  the original Chronos: the `MeanScaleUniformBins` tokenizer a `ChronosConfig`
           makes (mean scaling, uniform bins, EOS), a T5 `T5ForConditionalGeneration` trained
           on the tokens' cross-entropy, labels' padding set to -100 (as the repository's
           scripts/training/train.py does; `ChronosModel` wraps the T5 for inference only)

    python tests/clients/train_chronos.py --mode bolt --steps 3
    memledger trace tests/clients/train_chronos.py --steps 2 -o c.ledger -- --mode bolt
    memledger predict c.ledger --policy 'checkpoint:encoder.block.*'
"""

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from configs: nothing to download

import numpy as np
import torch
import transformers

transformers.logging.set_verbosity_error()

QUANTILES = [0.1, 0.5, 0.9]


def t5_config(args, **extra):
    from transformers import T5Config

    return T5Config(d_model=args.d_model, d_kv=args.d_model // 2, d_ff=2 * args.d_model,
                    num_layers=args.layers, num_decoder_layers=args.layers, num_heads=2,
                    dropout_rate=0.0 if args.no_dropout else 0.1,
                    decoder_start_token_id=0, pad_token_id=0, **extra)


def bolt(args):
    from chronos.chronos_bolt import ChronosBoltModelForForecasting

    cfg = t5_config(args, chronos_config={
        "context_length": args.context, "prediction_length": args.horizon,
        "input_patch_size": args.patch, "input_patch_stride": args.patch,
        "quantiles": QUANTILES, "use_reg_token": True})
    model = ChronosBoltModelForForecasting(cfg)

    def step_loss(batch):
        context, target = batch
        return model(context=context, target=target).loss
    return model, step_loss


def chronos2(args):
    from chronos.chronos2.config import Chronos2CoreConfig
    from chronos.chronos2.model import Chronos2Model

    cfg = Chronos2CoreConfig(d_model=args.d_model, d_kv=args.d_model // 2, d_ff=2 * args.d_model,
                             num_layers=args.layers, num_heads=2,
                             dropout_rate=0.0 if args.no_dropout else 0.1,
                             attn_implementation=args.attn,
                             chronos_config={
                                 "context_length": args.context, "output_patch_size": args.patch,
                                 "input_patch_size": args.patch, "input_patch_stride": args.patch,
                                 "quantiles": QUANTILES, "use_reg_token": True,
                                 "max_output_patches": 2})
    model = Chronos2Model(cfg)
    groups = torch.arange(args.batch) // 2          # pairs of series forecast jointly

    def step_loss(batch):
        context, target = batch
        return model(context=context, group_ids=groups, future_target=target,
                     num_output_patches=-(-args.horizon // args.patch)).loss
    return model, step_loss


def chronos_t5(args):
    from chronos.chronos import ChronosConfig
    from transformers import T5ForConditionalGeneration

    n_tokens = 64
    ccfg = ChronosConfig(tokenizer_class="MeanScaleUniformBins",
                         tokenizer_kwargs={"low_limit": -15.0, "high_limit": 15.0},
                         context_length=args.context, prediction_length=args.horizon,
                         n_tokens=n_tokens, n_special_tokens=2, pad_token_id=0, eos_token_id=1,
                         use_eos_token=True, model_type="seq2seq", num_samples=4,
                         temperature=1.0, top_k=50, top_p=1.0)
    tokenizer = ccfg.create_tokenizer()
    model = T5ForConditionalGeneration(t5_config(args, vocab_size=n_tokens, eos_token_id=1))

    def step_loss(batch):
        context, target = batch
        ids, mask, scale = tokenizer.context_input_transform(context)
        labels, label_mask = tokenizer.label_input_transform(target, scale)
        labels[labels == tokenizer.config.pad_token_id] = -100   # as the training script does
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss
    return model, step_loss


def fit(args) -> None:
    """`Chronos2Pipeline.fit`, as its fine-tuning notebook calls it: a copy of the model
    trained by `Chronos2Trainer` on `Chronos2Dataset`'s random windows (full or LoRA)."""
    import numpy as np
    from chronos.chronos2.pipeline import Chronos2Pipeline

    model, _ = chronos2(args)
    pipeline = Chronos2Pipeline(model=model)
    context, target = series(args, 8, 0)
    whole = torch.cat([context, target], -1).numpy()
    if args.covariates:   # a past-only and a known-future covariate beside each target
        inputs = [{"target": x, "past_covariates": {"a": np.cos(x), "b": np.sin(x)},
                   "future_covariates": {"b": None}} for x in whole]
    else:
        inputs = list(whole)
    with tempfile.TemporaryDirectory(prefix="chronos2-fit-") as tmp:
        pipeline.fit(inputs, prediction_length=args.horizon, num_steps=args.steps,
                     batch_size=args.batch, learning_rate=1e-4, output_dir=tmp,
                     validation_inputs=inputs[:4] if args.validate else None,
                     finetune_mode="lora" if args.lora else "full", disable_tqdm=True,
                     gradient_accumulation_steps=args.accumulate)


MODES = {"bolt": bolt, "chronos2": chronos2, "chronos": chronos_t5, "fit": fit}


def series(args, n: int, seed: int):
    """Random-walk series with a seasonal bump, split into context and target."""
    g = torch.Generator().manual_seed(seed)
    length = args.context + args.horizon
    t = torch.arange(length, dtype=torch.float32)
    x = torch.randn(n, length, generator=g).cumsum(-1) + 3 * torch.sin(t / 4) + 10
    if args.nan:   # missing values, as real series have: the models mask them out
        x[torch.rand(n, length, generator=g) < 0.15] = float("nan")
    return x[:, :args.context], x[:, args.context:]


class Batches(torch.utils.data.IterableDataset):
    """Whole batches, as `Chronos2Dataset` yields them (`Chronos2Trainer` sets the
    DataLoader's batch_size to None and reads the data set's `batch_size`)."""

    def __init__(self, args) -> None:
        self.args, self.batch_size = args, args.batch

    def __iter__(self):
        i = 0
        while True:
            context, target = series(self.args, self.batch_size, i)
            if self.args.mode == "bolt":   # ChronosBoltModelForForecasting.forward's names
                yield {"context": context, "target": target}
            else:
                yield {"context": context, "future_target": target,
                       "group_ids": torch.arange(self.batch_size) // 2,
                       "num_output_patches": -(-self.args.horizon // self.args.patch)}
            i += 1


def train_with_trainer(model, args) -> None:
    from chronos.chronos2.trainer import Chronos2Trainer
    from transformers import TrainingArguments

    with tempfile.TemporaryDirectory(prefix="chronos2-") as tmp:
        targs = TrainingArguments(output_dir=tmp, max_steps=args.steps,
                                  per_device_train_batch_size=args.batch, learning_rate=1e-4,
                                  lr_scheduler_type="linear", warmup_steps=0,
                                  optim="adamw_torch", logging_steps=1_000, report_to=[],
                                  save_strategy="no", use_cpu=True, bf16=args.bf16,
                                  dataloader_num_workers=0, disable_tqdm=True)
        Chronos2Trainer(model=model, args=targs, train_dataset=Batches(args)).train()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=sorted(MODES), default="bolt")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--horizon", type=int, default=8)
    ap.add_argument("--patch", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="sdpa", help="chronos2")
    ap.add_argument("--no-dropout", action="store_true")
    ap.add_argument("--nan", action="store_true", help="missing values in the series")
    ap.add_argument("--grad-ckpt", action="store_true",
                    help="the model's own gradient_checkpointing_enable()")
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 autocast (TrainingArguments(bf16=True))")
    ap.add_argument("--trainer", action="store_true", help="chronos2, bolt: under Chronos2Trainer")
    ap.add_argument("--lora", action="store_true", help="fit: finetune_mode='lora'")
    ap.add_argument("--covariates", action="store_true", help="fit: with covariates")
    ap.add_argument("--validate", action="store_true",
                    help="fit: validation_inputs (evaluated and saved at the last step)")
    ap.add_argument("--accumulate", type=int, default=1, help="fit: gradient_accumulation_steps")
    args = ap.parse_args()
    torch.manual_seed(0)
    np.random.seed(0)   # Chronos2Dataset draws its windows from numpy's global generator
    if args.mode == "fit":
        fit(args)
        return
    model, step_loss = MODES[args.mode](args)
    model.train()
    if args.grad_ckpt:
        model.gradient_checkpointing_enable()
    if args.trainer:
        train_with_trainer(model, args)
        return
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    for it in range(args.steps):
        opt.zero_grad()
        with torch.autocast("cpu", torch.bfloat16, enabled=args.bf16):
            loss = step_loss(series(args, args.batch, it))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        print(f"step {it} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
