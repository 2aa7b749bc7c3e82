"""kornia as its users train with it: differentiable data augmentation on the batch inside
the step (`kornia.augmentation.AugmentationSequential`, new random parameters each step,
drawn from torch's global generator), kornia's losses, kornia's geometry, and a small
network written in plain torch. Random data, seeded, nothing downloaded. Modes (`--mode`):

- `seg`: a small UNet (`down.*`, `mid`, `up.*`) on images and masks; the batch goes through
  `AugmentationSequential(RandomAffine, ColorJitter, RandomResizedCrop, RandomHorizontalFlip,
  data_keys=["input", "mask"])` (the geometric ones move image and mask alike) inside the
  step, as kornia's Lightning tutorial does in `on_after_batch_transfer`, under
  `torch.no_grad()` (its `DataAugmentation` module; `--aug-grad`: with grad, as DiffAugment
  does); loss `DiceLoss() + FocalLoss(alpha=0.5, gamma=2, reduction="mean")`;
- `recon`: a denoising autoencoder (`enc.*`, `dec.*`): `RandomGaussianNoise` and
  `RandomMotionBlur` on the input, `SSIMLoss(5)` + `TotalVariation` on the output;
- `stn`: a spatial transformer network: a localisation net (`loc`) predicts a 2x3 affine
  per image, `kornia.geometry.transform.warp_affine` resamples the image with it
  (differentiable in the matrix), a classifier (`cls.*`) reads the result; the batch was
  distorted by `RandomAffine` + `RandomPerspective` first; CrossEntropy;
- `homography`: a regression net (`body.*`) predicts the four corner offsets of a
  homography between a patch and the same patch warped by `RandomPerspective` (the
  augmentation's own `transform_matrix` is the ground truth); `get_perspective_transform`
  + `warp_perspective` warp the source by the prediction, and the loss is photometric
  (`SSIMLoss`) plus the corners' L1;
- `inside`: augmentation as a layer of the model (`nn.Sequential(stem, aug, body, head)`,
  as kornia's README puts a `RandomAffine` in an `nn.Sequential`): random parameters drawn
  inside the model's forward, with grad, on activations; `--auto`: a `RandAugment` policy
  from `kornia.augmentation.auto` instead.

    python tests/clients/train_kornia.py --mode seg --steps 3
    memledger trace tests/clients/train_kornia.py --steps 3 -o ko.ledger -- --mode seg

`--steps`: optimizer steps; `--batch`, `--size`: the batch and the image edge; `--adamw`:
AdamW instead of Adam. Blocks to put policies on: `down.*` / `up.*` (seg), `enc.*` / `dec.*`
(recon), `loc` / `cls.*` (stn), `body.*` (homography), `body.*` / `aug` (inside).
"""

import argparse
import warnings

import torch
import torch.nn.functional as F
from torch import nn


def conv_block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1),
                         nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, cin: int = 3, classes: int = 2, w: int = 8) -> None:
        super().__init__()
        self.down = nn.ModuleList([conv_block(cin, w), conv_block(w, 2 * w)])
        self.mid = conv_block(2 * w, 4 * w)
        self.up = nn.ModuleList([conv_block(4 * w + 2 * w, 2 * w), conv_block(2 * w + w, w)])
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        skips = []
        for d in self.down:
            x = d(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.mid(x)
        for u in self.up:
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            x = u(torch.cat([x, skips.pop()], 1))
        return self.head(x)


class AutoEncoder(nn.Module):
    def __init__(self, w: int = 8) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Sequential(nn.Conv2d(3, w, 3, 2, 1), nn.GELU()),
                                 nn.Sequential(nn.Conv2d(w, 2 * w, 3, 2, 1), nn.GELU()))
        self.dec = nn.Sequential(
            nn.Sequential(nn.ConvTranspose2d(2 * w, w, 4, 2, 1), nn.GELU()),
            nn.Sequential(nn.ConvTranspose2d(w, 3, 4, 2, 1), nn.Sigmoid()))

    def forward(self, x):
        return self.dec(self.enc(x))


class STN(nn.Module):
    """The spatial transformer of Jaderberg et al., as kornia's STN tutorial writes it with
    `warp_affine` (pixel coordinates) in place of `affine_grid` + `grid_sample`."""

    def __init__(self, size: int, classes: int = 4, w: int = 8) -> None:
        super().__init__()
        self.size = size
        self.loc = nn.Sequential(nn.Conv2d(3, w, 5, 2, 2), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                                 nn.Flatten(), nn.Linear(16 * w, 32), nn.ReLU(),
                                 nn.Linear(32, 6))
        nn.init.zeros_(self.loc[-1].weight)   # start at the identity
        with torch.no_grad():
            self.loc[-1].bias.copy_(torch.tensor([1.0, 0, 0, 0, 1.0, 0]))
        self.cls = nn.Sequential(conv_block(3, w), nn.Sequential(nn.MaxPool2d(2),
                                                                  conv_block(w, 2 * w)),
                                 nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                               nn.Linear(2 * w, classes)))

    def forward(self, x):
        from kornia.geometry.transform import warp_affine

        theta = self.loc(x).view(-1, 2, 3)
        # normalised [-1, 1] affine to pixels: kornia's warp_affine takes pixel matrices
        from kornia.geometry.conversions import denormalize_homography, normalize_homography
        h = torch.cat([theta, theta.new_tensor([0, 0, 1]).expand(len(x), 1, 3)], 1)
        hp = denormalize_homography(h, (self.size, self.size), (self.size, self.size))
        x = warp_affine(x, hp[:, :2], (self.size, self.size), align_corners=False)
        return self.cls(x)


class CornerNet(nn.Module):
    """HomographyNet (DeTone et al.): two stacked patches in, eight corner offsets out."""

    def __init__(self, w: int = 8) -> None:
        super().__init__()
        self.body = nn.Sequential(conv_block(2, w), nn.Sequential(nn.MaxPool2d(2),
                                                                  conv_block(w, 2 * w)),
                                  nn.Sequential(nn.MaxPool2d(2), conv_block(2 * w, 2 * w)))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(8 * w, 8))

    def forward(self, a, b):
        return self.head(self.body(torch.cat([a, b], 1))).view(-1, 4, 2)


def data(args, n: int):
    g = torch.Generator().manual_seed(1)
    img = torch.rand(n, 3, args.size, args.size, generator=g)
    # a blob per image, the mask its pixels
    yy, xx = torch.meshgrid(torch.arange(args.size), torch.arange(args.size), indexing="ij")
    c = torch.randint(args.size // 4, 3 * args.size // 4, (n, 2), generator=g)
    mask = (((yy - c[:, 0, None, None]) ** 2 + (xx - c[:, 1, None, None]) ** 2)
            < (args.size // 4) ** 2).float()[:, None]
    img = 0.6 * img + 0.4 * mask
    labels = torch.randint(0, 4, (n,), generator=g)
    return img, mask, labels


class DataAugmentation(nn.Module):
    """kornia's Lightning tutorial: the augmentation as a module, no gradient."""

    def __init__(self, args) -> None:
        super().__init__()
        import kornia.augmentation as K

        self.transforms = K.AugmentationSequential(
            K.RandomAffine(degrees=15.0, translate=(0.1, 0.1), scale=(0.9, 1.1), p=1.0),
            K.ColorJitter(0.2, 0.2, 0.2, 0.05, p=0.8),
            K.RandomResizedCrop((args.size, args.size), scale=(0.7, 1.0)),
            K.RandomHorizontalFlip(),
            data_keys=["input", "mask"])

    def forward(self, img, mask):
        return self.transforms(img, mask)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="seg", choices=["seg", "recon", "stn", "homography",
                                                     "inside"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--size", type=int, default=16)
    p.add_argument("--aug-grad", action="store_true")
    p.add_argument("--auto", action="store_true")
    p.add_argument("--adamw", action="store_true")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    import kornia.augmentation as K
    from kornia.geometry.transform import get_perspective_transform, warp_perspective
    from kornia.losses import DiceLoss, FocalLoss, SSIMLoss, TotalVariation

    torch.manual_seed(0)
    s = args.size
    if args.mode == "seg":
        model = UNet()
        aug = DataAugmentation(args)
        dice, focal = DiceLoss(), FocalLoss(alpha=0.5, gamma=2.0, reduction="mean")
    elif args.mode == "recon":
        model = AutoEncoder()
        aug = K.AugmentationSequential(K.RandomGaussianNoise(std=0.1, p=1.0),
                                       K.RandomMotionBlur(3, 15.0, 0.5, p=0.5))
        ssim, tv = SSIMLoss(5), TotalVariation()
    elif args.mode == "stn":
        model = STN(s)
        aug = K.AugmentationSequential(K.RandomAffine(degrees=30.0, translate=(0.15, 0.15)),
                                       K.RandomPerspective(0.3, p=0.5))
    elif args.mode == "homography":
        model = CornerNet()
        aug = K.RandomPerspective(0.25, p=1.0)
        ssim = SSIMLoss(5)
    else:
        inner = (K.auto.RandAugment(n=2, m=10) if args.auto else
                 K.AugmentationSequential(K.RandomAffine(degrees=10.0, p=1.0),
                                          K.RandomErasing(p=0.5)))
        model = nn.Sequential()
        model.add_module("stem", nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), nn.Sigmoid()))
        model.add_module("aug", inner)
        model.add_module("body", nn.Sequential(conv_block(3, 8), nn.Sequential(
            nn.MaxPool2d(2), conv_block(8, 16))))
        model.add_module("head", nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                               nn.Linear(16, 4)))
    opt = (torch.optim.AdamW if args.adamw else torch.optim.Adam)(model.parameters(), lr=1e-3)
    img, mask, labels = data(args, 4 * args.batch)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(img, mask, labels),
                                         batch_size=args.batch, shuffle=True,
                                         generator=torch.Generator().manual_seed(2))
    model.train()
    step = 0
    while step < args.steps:
        for x, m, y in loader:
            opt.zero_grad(set_to_none=True)
            if args.mode == "seg":
                with torch.set_grad_enabled(args.aug_grad):
                    x, m = aug(x, m)
                logits = model(x)
                target = m[:, 0].round().long()
                loss = dice(logits, target) + focal(logits, target)
            elif args.mode == "recon":
                noisy = aug(x)
                out = model(noisy)
                loss = ssim(out, x) + 1e-4 * tv(out).mean()
            elif args.mode == "stn":
                with torch.no_grad():
                    x = aug(x)
                loss = F.cross_entropy(model(x), y)
            elif args.mode == "homography":
                gray = x.mean(1, keepdim=True)
                with torch.no_grad():
                    warped = aug(gray)
                    hm = aug.transform_matrix                       # (B, 3, 3) source -> warped
                corners = torch.tensor([[0.0, 0.0], [s - 1.0, 0.0], [s - 1.0, s - 1.0],
                                        [0.0, s - 1.0]]).expand(len(x), 4, 2)
                moved = torch.cat([corners, torch.ones(len(x), 4, 1)], -1) @ hm.transpose(1, 2)
                truth = moved[..., :2] / moved[..., 2:] - corners
                pred = model(gray, warped)
                h = get_perspective_transform(corners, corners + pred)
                back = warp_perspective(gray, h, (s, s), align_corners=True)
                loss = ssim(back, warped) + F.l1_loss(pred, truth)
            else:
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
    print("loss", round(loss.item(), 4))


if __name__ == "__main__":
    main()
