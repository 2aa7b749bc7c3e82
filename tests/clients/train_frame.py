"""pytorch-frame (torch_frame, PyG team) as its README and examples train it: a DataFrame
of mixed columns materialized by `torch_frame.data.Dataset` into a `TensorFrame` (a
container of per-stype tensors: `feat_dict`, one entry per stype), batched by
torch_frame's `DataLoader`, and a model built from config whose `StypeWiseFeatureEncoder`
encodes each stype with its own encoder before the table convolutions. Seeded, tiny,
nothing downloaded (the DataFrame is drawn here).

    python tests/clients/train_frame.py --steps 3 --model ft
    memledger trace tests/clients/train_frame.py --steps 2 -o frame.ledger -- --model trompt
    memledger compare tests/clients/train_frame.py -p 'checkpoint:backbone.*' -- --model ft

Models (`--model`), each as its example in the repository's examples/ builds it:
`ft` (FTTransformer: `backbone.tab_transformer_convs.*`), `resnet` (ResNet:
`backbone.*` FCResidualBlocks), `tabnet` (TabNet with its entropy regularization),
`excel` (ExcelFormer: categoricals to numbers by `CatToNumTransform`, columns sorted by
`MutualInformationSort`, `ExcelFormerEncoder`, `--mixup feature|hidden`), `trompt`
(Trompt: a loss over every layer's prediction), `tabtr` (TabTransformer), `mlp`.

Columns: `--num N` numerical, `--cat N` categorical; `--multi` adds a multicategorical
column (MultiCategoricalEmbeddingEncoder), `--emb` an embedding column (a list of 4
floats a row: LinearEmbeddingEncoder), `--time` a timestamp column (TimestampEncoder);
the extra stypes only for the models that take them (ft, resnet, mlp). `--encoder
bucket|periodic` numerical encoder for ft/resnet/mlp. `--nan` puts NaNs in the
numerical columns (the encoders' `na_strategy`). `--task reg|clf`. `--validate` runs
the validation loader under no_grad in eval mode each step; `--accum N` accumulates.
"""

import argparse

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

import torch_frame
from torch_frame import stype
from torch_frame.data import DataLoader, Dataset
from torch_frame.nn import (EmbeddingEncoder, ExcelFormerEncoder, LinearBucketEncoder,
                            LinearEmbeddingEncoder, LinearEncoder, LinearPeriodicEncoder,
                            MultiCategoricalEmbeddingEncoder, TimestampEncoder)
from torch_frame.nn.models import (MLP, ExcelFormer, FTTransformer, ResNet, TabNet,
                                   TabTransformer, Trompt)
from torch_frame.transforms import CatToNumTransform, MutualInformationSort


def make_frame(args, rows: int) -> tuple[pd.DataFrame, dict]:
    rng = np.random.default_rng(0)
    cols: dict = {}
    col_to_stype: dict = {}
    for i in range(args.num):
        x = rng.standard_normal(rows)
        if args.nan:
            x[i::4] = np.nan
        cols[f"n{i}"], col_to_stype[f"n{i}"] = x, stype.numerical
    for i in range(args.cat):
        cols[f"c{i}"] = rng.choice(["a", "b", "c", "d", "e"][: 3 + i % 3], rows)
        col_to_stype[f"c{i}"] = stype.categorical
    if args.multi:
        cols["m"] = [list(rng.choice(["x", "y", "z", "w"], rng.integers(1, 4),
                                     replace=False)) for _ in range(rows)]
        col_to_stype["m"] = stype.multicategorical
    if args.emb:
        cols["e"] = [rng.standard_normal(4).astype(np.float32).tolist() for _ in range(rows)]
        col_to_stype["e"] = stype.embedding
    if args.time:
        days = rng.integers(0, 1000, rows)
        cols["t"] = [str(pd.Timestamp("2020-01-01") + pd.Timedelta(days=int(d)))
                     for d in days]
        col_to_stype["t"] = stype.timestamp
    w = rng.standard_normal(args.num)
    score = sum(w[i] * np.nan_to_num(cols[f"n{i}"]) for i in range(args.num))
    cols["y"] = score if args.task == "reg" else (score > 0).astype(int) \
        + (score > 1).astype(int)
    col_to_stype["y"] = stype.numerical if args.task == "reg" else stype.categorical
    return pd.DataFrame(cols), col_to_stype


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="ft",
                   choices=["ft", "resnet", "tabnet", "excel", "trompt", "tabtr", "mlp"])
    p.add_argument("--channels", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--num", type=int, default=3)
    p.add_argument("--cat", type=int, default=2)
    p.add_argument("--multi", action="store_true")
    p.add_argument("--emb", action="store_true")
    p.add_argument("--time", action="store_true")
    p.add_argument("--nan", action="store_true")
    p.add_argument("--encoder", default="linear", choices=["linear", "bucket", "periodic"])
    p.add_argument("--task", default="clf", choices=["reg", "clf"])
    p.add_argument("--mixup", default=None, choices=["feature", "hidden"])
    p.add_argument("--validate", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(0)
    np.random.seed(0)   # sklearn's mutual information (MutualInformationSort) jitters by it

    rows = args.batch * 4
    df, col_to_stype = make_frame(args, rows)
    split = np.array([0] * (rows // 2) + [1] * (rows // 2))  # 0 train, 1 val
    df["split"] = split
    dataset = Dataset(df, col_to_stype, target_col="y", split_col="split")
    dataset.materialize()
    train_ds, val_ds, _ = dataset.split()
    train_tf, val_tf = train_ds.tensor_frame, val_ds.tensor_frame
    clf = args.task == "clf"
    out = dataset.num_classes if clf else 1
    ch, nl = args.channels, args.layers

    if args.model == "excel":
        # as examples/excelformer.py: categoricals to numbers, columns sorted by mutual
        # information (fitted on the train frame), then the ExcelFormer encoder
        cat2num = CatToNumTransform()
        cat2num.fit(train_tf, dataset.col_stats)
        train_tf, val_tf = cat2num(train_tf), cat2num(val_tf)
        sort = MutualInformationSort(task_type=dataset.task_type)
        sort.fit(train_tf, cat2num.transformed_stats)
        train_tf, val_tf = sort(train_tf), sort(val_tf)
        col_stats, col_names = sort.transformed_stats, train_tf.col_names_dict
    else:
        col_stats, col_names = dataset.col_stats, train_tf.col_names_dict

    num_enc = {"linear": LinearEncoder(), "bucket": LinearBucketEncoder(),
               "periodic": LinearPeriodicEncoder()}[args.encoder]
    encoders = {stype.categorical: EmbeddingEncoder(), stype.numerical: num_enc,
                stype.multicategorical: MultiCategoricalEmbeddingEncoder(),
                stype.embedding: LinearEmbeddingEncoder(),
                stype.timestamp: TimestampEncoder()}
    encoders = {s: e for s, e in encoders.items() if s in col_names}
    common = dict(col_stats=col_stats, col_names_dict=col_names)
    if args.model == "ft":
        model = FTTransformer(channels=ch, out_channels=out, num_layers=nl,
                              stype_encoder_dict=encoders, **common)
    elif args.model == "resnet":
        model = ResNet(channels=ch, out_channels=out, num_layers=nl,
                       stype_encoder_dict=encoders, **common)
    elif args.model == "mlp":
        model = MLP(channels=ch, out_channels=out, num_layers=nl,
                    stype_encoder_dict=encoders, **common)
    elif args.model == "tabnet":
        model = TabNet(out_channels=out, num_layers=nl, split_feat_channels=ch,
                       split_attn_channels=ch, gamma=1.2, **common)
    elif args.model == "excel":
        num_cols = train_tf.num_cols
        model = ExcelFormer(in_channels=ch, out_channels=out, num_cols=num_cols,
                            num_layers=nl, num_heads=2, mixup=args.mixup,
                            stype_encoder_dict={stype.numerical: ExcelFormerEncoder(
                                ch, na_strategy=torch_frame.NAStrategy.MEAN)},
                            residual_dropout=0.1, **common)
    elif args.model == "trompt":
        model = Trompt(channels=ch, out_channels=out, num_prompts=4, num_layers=nl, **common)
    else:
        model = TabTransformer(channels=ch, out_channels=out, num_layers=nl, num_heads=2,
                               encoder_pad_size=2, attn_dropout=0.1, ffn_dropout=0.1,
                               **common)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    train_loader = DataLoader(train_tf, batch_size=args.batch, shuffle=True)
    val_loader = DataLoader(val_tf, batch_size=args.batch)

    def loss_of(tf) -> torch.Tensor:
        if args.model == "excel" and args.mixup and model.training:
            pred, y_mix = model(tf, mixup_encoded=True)
            return F.cross_entropy(pred, y_mix)
        if args.model == "tabnet":
            pred, reg = model(tf, return_reg=True)
        else:
            pred, reg = model(tf), 0.0
        y = tf.y
        if args.model == "trompt":
            # as examples/trompt.py: every layer's prediction is trained
            nlay = pred.size(1)
            pred = pred.reshape(-1, out)
            y = y.repeat_interleave(nlay)
        loss = F.cross_entropy(pred, y) if clf else F.mse_loss(pred.view(-1), y.float())
        return loss + 0.01 * reg

    batches = iter(train_loader)
    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            try:
                tf = next(batches)
            except StopIteration:
                batches = iter(train_loader)
                tf = next(batches)
            loss = loss_of(tf)
            (loss / args.accum if args.accum > 1 else loss).backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                total = sum(float(loss_of(tf)) for tf in val_loader)
            print(f"validation loss {total:.4f}")


if __name__ == "__main__":
    main()
