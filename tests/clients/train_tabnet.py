"""pytorch-tabnet as its users write it: a scikit-learn-style estimator whose `fit` runs the
whole loop, on random numpy tables (nothing downloaded).

    clf = TabNetClassifier(n_d=8, n_a=8, n_steps=3, optimizer_fn=torch.optim.Adam, ...)
    clf.fit(X_train, y_train, eval_set=[(X_valid, y_valid)], max_epochs=...,
            batch_size=..., virtual_batch_size=...)

TabNet's `fit` builds a DataLoader over the numpy arrays, and per batch sets every
`param.grad = None`, runs the network, adds the sparsity loss (`- lambda_sparse * M_loss`),
calls `loss.backward()`, `clip_grad_norm_` and `optimizer.step()`; after each epoch it
predicts the eval sets under `network.eval()` (no `no_grad`: the graph of each eval batch
is built and dropped) and runs its callbacks (History, EarlyStopping, the scheduler's).
The network: `embedder` (categorical embeddings, `--cat`), then `tabnet.encoder`: an
`initial_splitter` and per decision step `feat_transformers.N` (GLU blocks whose first
Linear layers are SHARED by every step: `shared.glu_layers.N.fc` is one module in every
transformer) and `att_transformers.N` (Linear, ghost batch norm - `GBN` splits the batch
into virtual batches of `--vbs` rows, a BatchNorm1d per chunk, then `torch.cat` - and
sparsemax or entmax15, custom autograd Functions that `ctx.save_for_backward`).

Modes:
- `clf`: TabNetClassifier (sparsemax), Adam, a StepLR scheduler (epoch level), an eval set
  with early stopping, a custom callback.
- `reg`: TabNetRegressor (`mask_type="entmax"`), 2 targets, a OneCycleLR scheduler stepped
  per batch (`is_batch_level`), RegressionSMOTE augmentations (in place on the batch).
- `pretrain`: TabNetPretrainer self-supervised (a RandomObfuscator masks features with
  `torch.bernoulli` each forward; encoder + decoder; UnsupervisedLoss), then a
  TabNetClassifier fine-tuned `from_unsupervised=` it. memledger's `--steps` counts the
  optimizer steps of both fits together (the pretrainer's `--pre-epochs` epochs first).
- `multi`: TabNetMultiTaskClassifier, 2 tasks (one Linear head per task).

`--cat`: two categorical columns with embeddings; `--grouped`: `grouped_features`
(attention over groups of columns); `--workers N`: the DataLoaders' `num_workers`;
`--balanced` (clf): `weights=1`, a WeightedRandomSampler by inverse class frequency;
`--smote` (clf): ClassificationSMOTE mixing rows of the batch in place; `--refit` (clf):
`fit` again with `warm_start=True` (the trained network, a new optimizer).

    python tests/clients/train_tabnet.py --mode clf
    memledger trace tests/clients/train_tabnet.py --steps 3 -o tab.ledger -- --mode clf
    memledger compare tests/clients/train_tabnet.py \\
        -p 'checkpoint:tabnet.encoder.feat_transformers.*' -- --mode clf
    memledger doctor tests/clients/train_tabnet.py -- --mode pretrain

`--epochs`: max_epochs (each `--rows / --batch` optimizer steps, drop_last).
"""

import argparse
import warnings

import numpy as np
import torch


def table(rows: int, cols: int, cat: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    if cat:   # columns 0 and 3: integer codes (TabNet embeds them)
        x[:, 0] = rng.integers(0, 5, rows)
        x[:, 3] = rng.integers(0, 7, rows)
    return x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["clf", "reg", "pretrain", "multi"], default="clf")
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--cols", type=int, default=12)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--vbs", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--pre-epochs", type=int, default=2)
    ap.add_argument("--width", type=int, default=8)   # n_d = n_a
    ap.add_argument("--n-steps", type=int, default=3)
    ap.add_argument("--cat", action="store_true")
    ap.add_argument("--grouped", action="store_true")
    ap.add_argument("--workers", type=int, default=0)   # the DataLoader's num_workers
    ap.add_argument("--balanced", action="store_true")   # clf: weights=1 (a weighted sampler)
    ap.add_argument("--smote", action="store_true")      # clf: ClassificationSMOTE
    ap.add_argument("--refit", action="store_true")      # clf: fit again, warm_start=True
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    np.random.seed(0)

    from pytorch_tabnet.callbacks import Callback
    from pytorch_tabnet.multitask import TabNetMultiTaskClassifier
    from pytorch_tabnet.pretraining import TabNetPretrainer
    from pytorch_tabnet.tab_model import TabNetClassifier, TabNetRegressor

    x = table(args.rows, args.cols, args.cat, 1)
    x_valid = table(args.rows // 4, args.cols, args.cat, 2)
    rng = np.random.default_rng(3)
    common = dict(n_d=args.width, n_a=args.width, n_steps=args.n_steps, seed=0, verbose=0,
                  device_name="cpu", optimizer_fn=torch.optim.Adam,
                  optimizer_params=dict(lr=2e-2))
    if args.cat:
        common.update(cat_idxs=[0, 3], cat_dims=[5, 7], cat_emb_dim=[2, 3])
    if args.grouped:
        common.update(grouped_features=[[1, 2], [4, 5, 6]])
    fit = dict(max_epochs=args.epochs, patience=args.epochs, batch_size=args.batch,
               virtual_batch_size=args.vbs, num_workers=args.workers, drop_last=True)

    class Progress(Callback):   # a user's callback: the losses per epoch
        def __init__(self) -> None:
            super().__init__()
            self.losses: list[float] = []

        def on_epoch_end(self, epoch, logs=None):
            self.losses.append(float(logs["loss"]))

    if args.mode == "clf":
        y, y_valid = rng.integers(0, 3, args.rows), rng.integers(0, 3, args.rows // 4)
        model = TabNetClassifier(**common, scheduler_fn=torch.optim.lr_scheduler.StepLR,
                                 scheduler_params=dict(step_size=2, gamma=0.9))
        if args.smote:
            from pytorch_tabnet.augmentations import ClassificationSMOTE
        model.fit(x, y, eval_set=[(x_valid, y_valid)], eval_name=["valid"],
                  eval_metric=["accuracy"], callbacks=[Progress()],
                  weights=1 if args.balanced else 0,
                  augmentations=ClassificationSMOTE(p=0.5, seed=0) if args.smote else None,
                  **fit)
        if args.refit:   # more epochs from the trained weights: a new optimizer, new state
            model.fit(x, y, eval_set=[(x_valid, y_valid)], warm_start=True, **fit)
        print("accuracy", (model.predict(x_valid) == y_valid).mean())
    elif args.mode == "reg":
        from pytorch_tabnet.augmentations import RegressionSMOTE

        y = rng.standard_normal((args.rows, 2)).astype(np.float32)
        y_valid = rng.standard_normal((args.rows // 4, 2)).astype(np.float32)
        steps = args.epochs * (args.rows // args.batch)
        model = TabNetRegressor(**common, mask_type="entmax",
                                scheduler_fn=torch.optim.lr_scheduler.OneCycleLR,
                                scheduler_params=dict(is_batch_level=True, max_lr=5e-2,
                                                      total_steps=steps))
        model.fit(x, y, eval_set=[(x_valid, y_valid)], eval_metric=["mae", "rmse"],
                  augmentations=RegressionSMOTE(p=0.5, seed=0), **fit)
        print("mse", float(((model.predict(x_valid) - y_valid) ** 2).mean()))
    elif args.mode == "pretrain":
        pre = TabNetPretrainer(**common, mask_type="entmax")
        pre.fit(x, eval_set=[x_valid], pretraining_ratio=0.5,
                **{**fit, "max_epochs": args.pre_epochs, "patience": args.pre_epochs})
        y, y_valid = rng.integers(0, 2, args.rows), rng.integers(0, 2, args.rows // 4)
        model = TabNetClassifier(**common)
        model.fit(x, y, eval_set=[(x_valid, y_valid)], from_unsupervised=pre, **fit)
        print("auc-trained", model.history["val_0_auc"][-1])
    else:
        y = np.stack([rng.integers(0, 3, args.rows), rng.integers(0, 2, args.rows)], 1)
        y_valid = np.stack([rng.integers(0, 3, args.rows // 4),
                            rng.integers(0, 2, args.rows // 4)], 1)
        model = TabNetMultiTaskClassifier(**common)
        model.fit(x, y, eval_set=[(x_valid, y_valid)], **fit)
        print("tasks", len(model.predict(x_valid)))


if __name__ == "__main__":
    main()
