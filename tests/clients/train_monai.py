"""MONAI 3-D segmentation, as its tutorials write it (spleen / BraTS / DynUNet / Swin-UNETR
notebooks), on tiny random volumes: a list of `{"image", "label"}` dicts, MONAI transforms
(`EnsureChannelFirstd`, `ScaleIntensityd`, `RandSpatialCropd`, `RandFlipd`: MetaTensors
with their metadata), `monai.data.DataLoader`, a network from `monai.networks.nets`, a loss
from `monai.losses`, Adam(W). Models (`--mode`):

- `unet`: `UNet(spatial_dims=3, channels=(8, 16, 32), strides=(2, 2), num_res_units=2,
  norm=--norm)`, `DiceLoss(to_onehot_y=True, softmax=True)` (`--loss dicece`: DiceCELoss);
- `segresnet`: `SegResNet(blocks_down=(1, 2, 2), init_filters=4, out_channels=3)`, the
  BraTS tutorial's `DiceLoss(sigmoid=True, squared_pred=True)` on a 3-channel one-hot label;
- `dynunet`: `DynUNet(..., deep_supervision=True, deep_supr_num=--levels - 2)` (filters 4,
  8, 16, ...; `--res`: residual blocks): in training the
  outputs are stacked along dim 1 and the loss is the DynUNet tutorial's weighted sum over
  `torch.unbind(out, 1)` (`--ds-loss`: monai's `DeepSupervisionLoss` over the list);
- `swinunetr`: `SwinUNETR(feature_size=12, depths=(1, 1, 1, 1), use_checkpoint=--swin-ckpt)`
  (its `use_checkpoint` runs each Swin block under `torch.utils.checkpoint`), DiceCELoss;
- `unetr`: `UNETR(img_size=32, hidden_size=48, mlp_dim=96, num_heads=4)`, a ViT encoder;
- `engine`: the unet under `monai.engines.SupervisedTrainer` (pytorch-ignite), `run()`
  (`--decollate`: each output decollated per item and post-processed, as the tutorials do).

`--eval-every N`: every N steps, `sliding_window_inference(roi_size=--size, sw_batch_size=2)`
over a validation volume under `model.eval()` + `torch.no_grad()`, `DiceMetric` on it, then
`model.train()` (the tutorials' validation loop).

    python tests/clients/train_monai.py --mode unet --steps 3
    memledger trace tests/clients/train_monai.py --steps 3 -o mo.ledger -- --mode dynunet

`--no-meta`: `set_track_meta(False)` (MONAI's fast-training switch): the transforms make
plain tensors, not MetaTensors (a `trace --fake` run needs it: a FakeTensor cannot become a
MetaTensor).

`--steps`: optimizer steps (the script stops after that many); `--size`: the crop's edge
(the volumes are 8 voxels wider before the crop); `--dims 2`: 2-D images instead of 3-D
volumes (SwinUNETR needs edges divisible by 32 and more than one voxel at its bottleneck:
`--mode swinunetr --dims 2 --size 64`); `--batch`: crops per step.
"""

import argparse
import warnings

import numpy as np
import torch


def volumes(n: int, edge: int, dims: int, channel: bool = False):
    """`n` image/label pairs as numpy arrays (channel-less, as loaded from NIfTI; with
    `channel`, one channel first)."""
    rng = np.random.RandomState(1)
    out = []
    for _ in range(n):
        img = rng.rand(*(1,) * channel, *(edge,) * dims).astype(np.float32)
        lab = (img > 0.7).astype(np.float32)   # one foreground class
        out.append({"image": img, "label": lab})
    return out


def build(args):
    from monai.networks.layers import Norm
    from monai.networks.nets import UNETR, DynUNet, SegResNet, SwinUNETR, UNet

    if args.mode in ("unet", "engine"):
        return UNet(spatial_dims=args.dims, in_channels=1, out_channels=2, channels=(8, 16, 32),
                    strides=(2, 2), num_res_units=2,
                    norm=Norm.BATCH if args.norm == "batch" else Norm.INSTANCE)
    if args.mode == "segresnet":
        return SegResNet(spatial_dims=args.dims, blocks_down=(1, 2, 2), blocks_up=(1, 1),
                         init_filters=4, in_channels=1, out_channels=3, dropout_prob=0.0,
                         norm=("group", {"num_groups": 2}))
    if args.mode == "dynunet":
        n = args.levels   # input block, n - 2 down blocks, bottleneck; n - 1 up blocks
        return DynUNet(spatial_dims=args.dims, in_channels=1, out_channels=2,
                       kernel_size=[3] * n, strides=[1] + [2] * (n - 1),
                       upsample_kernel_size=[2] * (n - 1),
                       filters=[4 * 2 ** i for i in range(n)],
                       norm_name="instance", deep_supervision=True, deep_supr_num=n - 2,
                       res_block=args.res)
    if args.mode == "swinunetr":
        return SwinUNETR(in_channels=1, out_channels=2, feature_size=12, depths=(1, 1, 1, 1),
                         num_heads=(3, 6, 12, 24), use_checkpoint=args.swin_ckpt,
                         use_v2=args.v2, spatial_dims=args.dims)
    return UNETR(in_channels=1, out_channels=2, img_size=args.size, feature_size=8,
                 hidden_size=48, mlp_dim=96, num_heads=4, proj_type="conv",
                 spatial_dims=args.dims)


def loss_for(args):
    from monai.losses import DeepSupervisionLoss, DiceCELoss, DiceLoss

    if args.mode == "segresnet":
        return DiceLoss(smooth_nr=0, smooth_dr=1e-5, squared_pred=True, to_onehot_y=False,
                        sigmoid=True)
    if args.mode == "dynunet":
        base = DiceCELoss(to_onehot_y=True, softmax=True)
        if args.ds_loss:
            ds = DeepSupervisionLoss(base)
            return lambda out, y: ds(list(torch.unbind(out, dim=1)), y)

        def weighted(out, y):   # the DynUNet tutorial's loop over the stacked heads
            preds = torch.unbind(out, dim=1)
            return sum(0.5 ** i * base(p, y) for i, p in enumerate(preds))
        return weighted
    if args.mode in ("swinunetr", "unetr") or args.loss == "dicece":
        return DiceCELoss(to_onehot_y=True, softmax=True)
    return DiceLoss(to_onehot_y=True, softmax=True)


def loaders(args):
    from monai.data import DataLoader, Dataset
    from monai.transforms import (Compose, EnsureChannelFirstd, EnsureTyped, RandFlipd,
                                  RandSpatialCropd, ScaleIntensityd)

    # EnsureChannelFirst reads metadata through a MetaTensor even without tracking it: the
    # volumes come channel-first instead under --no-meta
    first = [] if args.no_meta else [
        EnsureChannelFirstd(keys=["image", "label"], channel_dim="no_channel")]
    train_tf = Compose([
        *first,
        ScaleIntensityd(keys="image"),
        RandSpatialCropd(keys=["image", "label"], roi_size=(args.size,) * args.dims,
                         random_size=False),
        RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=0),
        EnsureTyped(keys=["image", "label"]),
    ])
    val_tf = Compose([*first, ScaleIntensityd(keys="image"),
                      EnsureTyped(keys=["image", "label"])])
    data = volumes(8, args.size + 8, args.dims, channel=args.no_meta)
    train = DataLoader(Dataset(data[:6], transform=train_tf), batch_size=args.batch,
                       shuffle=True, num_workers=0)
    val = DataLoader(Dataset(data[6:7], transform=val_tf), batch_size=1, num_workers=0)
    return train, val


def to_brats(label):
    """One foreground class as the BraTS tutorial's three overlapping channels."""
    return torch.cat([label, label, 1 - label], dim=1)


def validate(model, val, args):
    from monai.inferers import sliding_window_inference
    from monai.metrics import DiceMetric
    from monai.transforms import AsDiscrete

    metric = DiceMetric(include_background=False, reduction="mean")
    post_pred, post_label = AsDiscrete(argmax=True, to_onehot=2), AsDiscrete(to_onehot=2)
    model.eval()
    with torch.no_grad():
        for batch in val:
            out = sliding_window_inference(batch["image"], (args.size,) * args.dims, 2, model,
                                           overlap=0.25)
            if args.mode == "segresnet":
                out = out[:, :2]
            metric(y_pred=[post_pred(o) for o in out], y=[post_label(y) for y in batch["label"]])
    score = metric.aggregate().item()
    metric.reset()
    if args.bug != "no-train":
        model.train()
    return score


def run_engine(args, model, loss_fn, optimizer, train):
    from monai.transforms import Compose

    from monai.engines import SupervisedTrainer
    from monai.transforms import Activationsd, AsDiscreted

    # the tutorials' post-processing of each decollated item (`--decollate`)
    post = Compose([Activationsd(keys="pred", softmax=True),
                    AsDiscreted(keys="pred", argmax=True)]) if args.decollate else None

    trainer = SupervisedTrainer(device=torch.device("cpu"), max_epochs=args.steps,
                                train_data_loader=train, network=model, optimizer=optimizer,
                                loss_function=loss_fn, epoch_length=1,
                                decollate=args.decollate, postprocessing=post)
    trainer.run()
    print("loss", trainer.state.output[0]["loss"] if isinstance(trainer.state.output, list)
          else trainer.state.output["loss"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="unet",
                   choices=["unet", "segresnet", "dynunet", "swinunetr", "unetr", "engine"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--dims", type=int, default=3, choices=[2, 3])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--norm", default="batch", choices=["batch", "instance"])
    p.add_argument("--loss", default="dice", choices=["dice", "dicece"])
    p.add_argument("--ds-loss", action="store_true")
    p.add_argument("--res", action="store_true", help="dynunet: residual blocks")
    p.add_argument("--levels", type=int, default=4, help="dynunet: resolution levels")
    p.add_argument("--swin-ckpt", action="store_true", help="SwinUNETR(use_checkpoint=True)")
    p.add_argument("--v2", action="store_true", help="SwinUNETR(use_v2=True)")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--decollate", action="store_true",
                   help="engine: decollate=True with the tutorials' post-processing")
    p.add_argument("--bug", default="", choices=["", "no-train", "no-zero"],
                   help="a planted bug for the doctor: validation leaves the model in eval "
                        "mode; no optimizer.zero_grad()")
    p.add_argument("--no-meta", action="store_true",
                   help="set_track_meta(False): plain tensors instead of MetaTensors")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    from monai.data import set_track_meta
    from monai.utils import set_determinism

    set_determinism(seed=0)
    set_track_meta(not args.no_meta)
    model = build(args)
    loss_fn = loss_for(args)
    if args.mode in ("swinunetr", "unetr"):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-5)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    train, val = loaders(args)
    if args.mode == "engine":
        run_engine(args, model, loss_fn, optimizer, train)
        return
    model.train()
    step = 0
    while step < args.steps:
        for batch in train:
            inputs, labels = batch["image"], batch["label"]
            if args.mode == "segresnet":
                labels = to_brats(labels)
            if args.bug != "no-zero":
                optimizer.zero_grad()
            outputs = model(inputs)
            loss = loss_fn(outputs, labels)
            loss.backward()
            optimizer.step()
            step += 1
            print(f"step {step} loss {loss.item():.4f}")
            if args.eval_every and step % args.eval_every == 0:
                print(f"val dice {validate(model, val, args):.4f}")
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
