"""Train a tiny sentence-transformers bi-encoder with one of its contrastive losses.

    python tests/clients/train_sbert.py --loss cached_mnrl
    memledger trace tests/clients/train_sbert.py --steps 3 -o sb.ledger -- --loss cached_mnrl

Nothing is downloaded: a 2-layer BERT (hidden 64) is built from a config, a WordLevel
tokenizer over a 40-word vocabulary is built in code, both are written to a temporary
folder and read back by `models.Transformer` (as a local checkpoint is), then wrapped with
`models.Pooling` (mean) into a `SentenceTransformer`. The data are random "sentences" of
those words, made with a seeded generator.

`--loss`:
  mnrl          MultipleNegativesRankingLoss on (anchor, positive) pairs
  cached_mnrl   CachedMultipleNegativesRankingLoss (GradCache): the embeddings are made
                without gradients in mini-batches of `--mini-batch`, the loss's gradient
                w.r.t. them is cached, and each mini-batch is run again with gradients
                inside the backward of the returned loss (a hook on it) and back-propagated
                with the cached gradient, its RNG state restored so that dropout repeats
  cosent        CoSENTLoss on (sentence1, sentence2, score)
  triplet       TripletLoss on (anchor, positive, negative)

`--loop trainer` (the default) trains with `SentenceTransformerTrainer` over a
`datasets.Dataset.from_dict` in memory, as users do; `--loop plain` calls the loss module
on `model.preprocess(...)` features and steps an AdamW itself.

`--encode N` (with `--steps 0`: no training) embeds N batches of sentences with
`model.encode(...)` (its own no_grad loop, a batch per `--batch-size` sentences), as
retrieval users do; the doctor watches it by forward:
    memledger doctor --steps-by forward tests/clients/train_sbert.py -- --steps 0 --encode 3
"""

import argparse
import os
import random
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
import transformers
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

from sentence_transformers import SentenceTransformer, losses, models

transformers.logging.set_verbosity_error()

WORDS = [f"w{i}" for i in range(40)]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_model(folder: str, layers: int, hidden: int, seq: int) -> SentenceTransformer:
    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(tok_models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                   model_max_length=seq)
    bert = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=hidden,
                                num_hidden_layers=layers, num_attention_heads=2,
                                intermediate_size=2 * hidden, max_position_embeddings=seq),
                     add_pooling_layer=False)
    bert.save_pretrained(folder)
    fast.save_pretrained(folder)
    word = models.Transformer(folder, max_seq_length=seq)
    pool = models.Pooling(word.get_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[word, pool], device="cpu")


def sentence(rng: random.Random, lo: int = 4, hi: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def columns(loss: str, n: int) -> dict:
    rng = random.Random(0)
    if loss in ("mnrl", "cached_mnrl"):
        return {"anchor": [sentence(rng) for _ in range(n)],
                "positive": [sentence(rng) for _ in range(n)]}
    if loss == "triplet":
        return {"anchor": [sentence(rng) for _ in range(n)],
                "positive": [sentence(rng) for _ in range(n)],
                "negative": [sentence(rng) for _ in range(n)]}
    return {"sentence1": [sentence(rng) for _ in range(n)],
            "sentence2": [sentence(rng) for _ in range(n)],
            "score": [rng.random() for _ in range(n)]}


def make_loss(name: str, model: SentenceTransformer, mini_batch: int):
    if name == "mnrl":
        return losses.MultipleNegativesRankingLoss(model)
    if name == "cached_mnrl":
        return losses.CachedMultipleNegativesRankingLoss(model, mini_batch_size=mini_batch)
    if name == "cosent":
        return losses.CoSENTLoss(model)
    return losses.TripletLoss(model)


def train_plain(model, loss, data: dict, steps: int, batch: int) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    label_col = "score" if "score" in data else None
    texts = [c for c in data if c != label_col]
    model.train()
    for step in range(steps):
        rows = slice(step * batch, (step + 1) * batch)
        features = [model.preprocess(data[c][rows]) for c in texts]
        labels = torch.tensor(data[label_col][rows]) if label_col else None
        value = loss(features, labels)
        value.backward()
        opt.step()
        opt.zero_grad()


def train_trainer(model, loss, data: dict, steps: int, batch: int, folder: str) -> None:
    from datasets import Dataset

    from sentence_transformers import (SentenceTransformerTrainer,
                                       SentenceTransformerTrainingArguments)

    args = SentenceTransformerTrainingArguments(
        output_dir=folder, max_steps=steps, per_device_train_batch_size=batch,
        logging_steps=1_000, report_to=[], save_strategy="no", use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, seed=0)
    SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_dict(data),
                               loss=loss).train()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--loss", choices=["mnrl", "cached_mnrl", "cosent", "triplet"],
                   default="mnrl")
    p.add_argument("--loop", choices=["trainer", "plain"], default="trainer")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--mini-batch", type=int, default=4)
    p.add_argument("--encode", type=int, default=0, help="batches to embed with encode()")
    args = p.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="sbert-") as folder:
        model = build_model(os.path.join(folder, "model"), args.layers, args.hidden, args.seq)
        loss = make_loss(args.loss, model, args.mini_batch)
        data = columns(args.loss, args.steps * args.batch_size)
        if args.encode:
            sentences = columns("mnrl", args.encode * args.batch_size)["anchor"]
            emb = model.encode(sentences, batch_size=args.batch_size, convert_to_tensor=True)
            print("encoded", tuple(emb.shape))
        elif args.loop == "plain":
            train_plain(model, loss, data, args.steps, args.batch_size)
        else:
            train_trainer(model, loss, data, args.steps, args.batch_size,
                          os.path.join(folder, "out"))


if __name__ == "__main__":
    main()
