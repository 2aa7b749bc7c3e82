"""deepctr-torch as its users write it: feature columns (`SparseFeat`, `DenseFeat`,
`VarLenSparseFeat`), a CTR model built from them, `model.compile("adam",
"binary_crossentropy")` and the library's own Keras-like `model.fit(x, y, batch_size=...,
epochs=...)` on random numpy tables (nothing downloaded).

    feats = [SparseFeat("c0", vocabulary_size=50, embedding_dim=4), ...,
             DenseFeat("d0", 1), ...]
    model = DeepFM(feats, feats, dnn_hidden_units=(32, 16), device="cpu")
    model.compile(args.optim, "binary_crossentropy", metrics=["binary_crossentropy", "auc"])
    model.fit(x_dict, y, batch_size=64, epochs=2, verbose=1)

`fit` concatenates the columns into one float table, builds a DataLoader over it and per
batch runs the model, `optim.zero_grad()`, `F.binary_cross_entropy(..., reduction="sum")`
plus `get_regularization_loss()` (L2 over whole embedding tables, summed in place into a
fresh zeros tensor) plus the model's `aux_loss`, `loss.item()`, `backward()`,
`optim.step()`, then the metrics on numpy copies; tqdm draws a bar on stderr and it prints
the device and an epoch line. `--loop hand`: the same model, data and loss written out in
a plain loop (as its examples do when they need more control).

Every model keeps its embedding tables in `embedding_dict` (`vocab x dim`, fp32) and the
linear part's (`vocab x 1`) in `linear_model.embedding_dict`; the DNN is `dnn`, the
interaction block `fm` (DeepFM), `crossnet` (DCN), `cin` (xDeepFM), `attention` (DIN's
local activation unit over the behaviour sequence, `VarLenSparseFeat`s); DIEN's
`interest_extractor` (a GRU and the auxiliary net) and `interest_evolution` (AUGRU).

    python tests/clients/train_deepctr.py --model deepfm
    memledger trace tests/clients/train_deepctr.py --steps 2 -o ctr.ledger -- --model din
    memledger compare tests/clients/train_deepctr.py -p 'checkpoint:dnn' -- --model xdeepfm
"""

import argparse

import numpy as np
import torch


def columns(args):
    from deepctr_torch.inputs import DenseFeat, SparseFeat, VarLenSparseFeat

    sparse = [SparseFeat(f"c{i}", vocabulary_size=args.vocab + 10 * i,
                         embedding_dim=args.dim) for i in range(args.sparse)]
    dense = [DenseFeat(f"d{i}", 1) for i in range(args.dense)]
    if args.model not in ("din", "dien"):
        return sparse + dense, []
    # DIN: the item and its category, and the user's history of both (padded with 0)
    item = [SparseFeat("item", args.vocab, embedding_dim=args.dim),
            SparseFeat("cate", 20, embedding_dim=args.dim)]
    hist = [VarLenSparseFeat(SparseFeat("hist_item", args.vocab, embedding_dim=args.dim,
                                        embedding_name="item"), maxlen=args.seq,
                             length_name="seq_length"),
            VarLenSparseFeat(SparseFeat("hist_cate", 20, embedding_dim=args.dim,
                                        embedding_name="cate"), maxlen=args.seq,
                             length_name="seq_length")]
    if args.model == "dien":   # negative samples of the history, for the auxiliary loss
        hist += [VarLenSparseFeat(SparseFeat(f"neg_hist_{k}", v, embedding_dim=args.dim,
                                             embedding_name=k), maxlen=args.seq,
                                  length_name="seq_length")
                 for k, v in (("item", args.vocab), ("cate", 20))]
    return sparse + item + dense + hist, ["item", "cate"]


def data(args, feats):
    from deepctr_torch.inputs import DenseFeat, SparseFeat, VarLenSparseFeat

    rng = np.random.default_rng(0)
    n, x = args.rows, {}
    lengths = rng.integers(1, args.seq + 1, n)
    for f in feats:
        if isinstance(f, SparseFeat):
            x[f.name] = rng.integers(0, f.vocabulary_size, n)
        elif isinstance(f, DenseFeat):
            x[f.name] = rng.random(n).astype(np.float32)
        elif isinstance(f, VarLenSparseFeat):
            seq = rng.integers(1, f.vocabulary_size, (n, f.maxlen))
            seq[np.arange(f.maxlen)[None, :] >= lengths[:, None]] = 0
            x[f.name] = seq
    if args.model in ("din", "dien"):
        x["seq_length"] = lengths
    return x, rng.integers(0, 2, n).astype(np.float32)


def build(args, feats, history):
    from deepctr_torch.models import DCN, DIEN, DIN, DeepFM, xDeepFM

    hidden = (args.hidden, args.hidden // 2)
    common = dict(dnn_hidden_units=hidden, device="cpu", l2_reg_embedding=1e-5,
                  dnn_dropout=args.dropout)
    if args.model == "deepfm":
        return DeepFM(feats, feats, **common)
    if args.model == "dcn":
        return DCN(feats, feats, cross_num=2, **common)
    if args.model == "xdeepfm":
        return xDeepFM(feats, feats, cin_layer_size=(8, 8), **common)
    if args.model == "din":
        return DIN(feats, history, att_hidden_size=(16, 8), **common)
    # DIEN: a GRU extracts interests (its auxiliary loss on the negatives is kept in
    # `model.aux_loss`, which fit adds), an AUGRU evolves them under attention
    return DIEN(feats, history, gru_type="AUGRU", use_negsampling=True,
                att_hidden_units=(16, 8), **common)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["deepfm", "dcn", "xdeepfm", "din", "dien"], default="deepfm")
    ap.add_argument("--loop", choices=["fit", "hand"], default="fit")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--sparse", type=int, default=3)   # SparseFeat columns c0..
    ap.add_argument("--dense", type=int, default=2)    # DenseFeat columns d0..
    ap.add_argument("--vocab", type=int, default=50)   # c_i: vocab + 10 i rows
    ap.add_argument("--dim", type=int, default=4)      # embedding_dim
    ap.add_argument("--hidden", type=int, default=32)  # DNN: (hidden, hidden // 2)
    ap.add_argument("--seq", type=int, default=5)      # DIN: behaviour sequence length
    ap.add_argument("--verbose", type=int, default=1)  # fit's: 1 a tqdm bar, 2 a line
    ap.add_argument("--val", type=float, default=0.0)  # fit's validation_split
    ap.add_argument("--dropout", type=float, default=0.0)  # dnn_dropout
    ap.add_argument("--ckpt", default="")   # fit: ModelCheckpoint(DIR/best.pt) + EarlyStopping
    ap.add_argument("--optim", choices=["adam", "adagrad", "rmsprop", "sgd"], default="adam")
    args = ap.parse_args()
    torch.manual_seed(0)

    from deepctr_torch.inputs import get_feature_names

    feats, history = columns(args)
    x, y = data(args, feats)
    model = build(args, feats, history)
    if args.loop == "fit":
        model.compile(args.optim, "binary_crossentropy", metrics=["binary_crossentropy", "auc"])
        x_in = {name: x[name] for name in get_feature_names(feats)}
        callbacks = []
        if args.ckpt:   # as its README: keep the best weights by validation loss
            from deepctr_torch.callbacks import EarlyStopping, ModelCheckpoint

            callbacks = [EarlyStopping(monitor="val_binary_crossentropy", patience=1),
                         ModelCheckpoint(f"{args.ckpt}/best.pt", save_best_only=True,
                                         save_weights_only=True,
                                         monitor="val_binary_crossentropy")]
        model.fit(x_in, y, batch_size=args.batch, epochs=args.epochs, verbose=args.verbose,
                  validation_split=args.val, callbacks=callbacks)
        print("history", model.history.history["loss"])
        return
    # the same step by hand: one float table, the model, BCE + its L2 over embeddings
    names = get_feature_names(feats)
    cols = [np.asarray(x[k], dtype=np.float32).reshape(args.rows, -1) for k in names]
    table = torch.from_numpy(np.concatenate(cols, axis=-1))
    target = torch.from_numpy(y)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(args.epochs):
        for i in range(0, args.rows, args.batch):
            xb, yb = table[i:i + args.batch], target[i:i + args.batch]
            pred = model(xb).squeeze(-1)
            loss = torch.nn.functional.binary_cross_entropy(pred, yb, reduction="sum")
            loss = loss + model.get_regularization_loss() + model.aux_loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("loss", loss.item())


if __name__ == "__main__":
    main()
