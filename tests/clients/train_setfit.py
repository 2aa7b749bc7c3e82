"""Few-shot text classification with SetFit, the way its README trains it.

    python tests/clients/train_setfit.py --head torch
    memledger trace tests/clients/train_setfit.py --steps 3 -o sf.ledger -- --head torch

Nothing is downloaded: the body is a tiny sentence-transformers bi-encoder (a 2-layer BERT,
hidden 64, built from a config; a WordLevel tokenizer over 40 words built in code; both
written to a temporary folder and read back by `models.Transformer`, then mean-pooled), as
tests/clients/train_sbert.py builds it. The data are a `datasets.Dataset` of random
"sentences" with a label each (`--classes` of them, `--shots` sentences per class), made
with a seeded generator.

`SetFitModel(model_body=..., model_head=...)` is trained by `setfit.Trainer(...).train()`:
  1. the body phase: SetFit makes (sentence, sentence, same-label) pairs from the few shots
     (`ContrastiveDataset`) and fine-tunes the body with `CosineSimilarityLoss` through
     sentence-transformers' trainer, `--body-steps` optimizer steps of `--batch-size` pairs;
  2. the head phase:
       `--head torch`     a differentiable `SetFitHead` (`use_differentiable_head=True`),
                          trained by `SetFitModel.fit`'s own AdamW loop over the shots, one
                          step per `--head-batch` sentences, for `--head-epochs` epochs; the
                          body frozen, or trained with it under `--end-to-end`
       `--head logistic`  the default scikit-learn `LogisticRegression`: the body encodes
                          the shots (`encode`, no grad) and sklearn fits the head (no
                          optimizer step of torch's)

`--loss`: the body phase's loss, `cosine` (SetFit's default `CosineSimilarityLoss` on its
pairs), `supcon` (SetFit's own `SupConLoss`) or `batch_hard` (sentence-transformers'
`BatchHardTripletLoss`): these two take (sentence, label) rows, batched by label.
`--distill`: `DistillationTrainer` distils a teacher `SetFitModel` (twice as deep, a torch
head) into the model: the teacher's embeddings (`encode`, no grad) give the pairs' target
similarities, its predictions the head phase's labels.
"""

import argparse
import os
import random
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
import transformers

from train_sbert import WORDS, build_model as build_body  # noqa: E402  (the same tiny body)

transformers.logging.set_verbosity_error()


def few_shots(classes: int, shots: int):
    """`shots` sentences per class; class c draws its words mostly from its own tenth of
    the vocabulary, so that there is something to learn."""
    from datasets import Dataset

    rng = random.Random(0)
    text, label = [], []
    for _ in range(shots):
        for c in range(classes):
            own = WORDS[c * 4:(c + 1) * 4]
            text.append(" ".join(rng.choice(own if rng.random() < 0.7 else WORDS)
                                 for _ in range(rng.randint(4, 10))))
            label.append(c)
    return Dataset.from_dict({"text": text, "label": label})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--head", choices=["torch", "logistic"], default="torch")
    p.add_argument("--loss", choices=["cosine", "supcon", "batch_hard"], default="cosine",
                   help="the body phase's loss")
    p.add_argument("--distill", action="store_true",
                   help="distil a teacher (a 4-layer body, its own torch head) into the model")
    p.add_argument("--end-to-end", action="store_true", help="train the body in the head phase")
    p.add_argument("--body-steps", type=int, default=2, help="the body phase's max_steps")
    p.add_argument("--head-epochs", type=int, default=1)
    p.add_argument("--classes", type=int, default=2)
    p.add_argument("--shots", type=int, default=8, help="sentences per class")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=8, help="pairs per body step")
    p.add_argument("--head-batch", type=int, default=0,
                   help="sentences per head step (0: --batch-size)")
    args = p.parse_args()

    from sentence_transformers import losses

    from setfit import DistillationTrainer, SetFitHead, SetFitModel, Trainer, TrainingArguments
    from setfit.losses import SupConLoss

    loss = {"cosine": losses.CosineSimilarityLoss, "supcon": SupConLoss,
            "batch_hard": losses.BatchHardTripletLoss}[args.loss]

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="setfit-") as folder:
        body = build_body(os.path.join(folder, "body"), args.layers, args.hidden, args.seq)
        if args.head == "torch":
            head = SetFitHead(in_features=args.hidden, out_features=args.classes)
            model = SetFitModel(model_body=body, model_head=head)
        else:
            from sklearn.linear_model import LogisticRegression

            # the head `SetFitModel.from_pretrained` gives by default
            model = SetFitModel(model_body=body, model_head=LogisticRegression())
        training = TrainingArguments(
            output_dir=os.path.join(folder, "out"),
            batch_size=(args.batch_size, args.head_batch or args.batch_size),
            num_epochs=(1, args.head_epochs), max_steps=args.body_steps,
            loss=loss, end_to_end=args.end_to_end, max_length=args.seq, report_to="none",
            save_strategy="no", logging_strategy="no", show_progress_bar=False, seed=0)
        data = few_shots(args.classes, args.shots)
        if args.distill:
            # the teacher a user would load trained: built the same way, twice as deep
            teacher = SetFitModel(
                model_body=build_body(os.path.join(folder, "teacher"), 2 * args.layers,
                                      args.hidden, args.seq),
                model_head=SetFitHead(in_features=args.hidden, out_features=args.classes))
            trainer = DistillationTrainer(teacher_model=teacher, student_model=model,
                                          args=training, train_dataset=data)
        else:
            trainer = Trainer(model=model, args=training, train_dataset=data)
        trainer.train()
        print("predicted", model.predict(["w0 w1 w2 w3", "w4 w5 w6 w7"]).tolist())


if __name__ == "__main__":
    main()
