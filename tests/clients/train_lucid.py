"""lucidrains' pure-PyTorch models (x-transformers, vit-pytorch) under a nanoGPT-style loop:
AdamW with weight-decay groups (matrices decay; norms, biases and embeddings do not),
gradient accumulation, clipping, optional bf16 autocast on CPU. Tiny shapes, nothing
downloaded.

    python tests/clients/train_lucid.py --case gpt --steps 3
    memledger trace tests/clients/train_lucid.py --steps 2 -o lucid.ledger -- --case gpt

Cases: gpt (Decoder, rotary, ff_glu, attn_flash False), gpt_flash (same, attn_flash True:
scaled_dot_product_attention), memtok (memory tokens, RMSNorm, qk-norm, residual attention),
xtransformer (XTransformer encoder-decoder with cross attention), vit (vit-pytorch ViT),
cait (CaiT: layer scale, class-attention layers), vit_fft (SimpleViT with an FFT branch),
vit_value_residual (SimpleViT whose blocks mix in the first block's values),
vit_patch_dropout (SimpleViT dropping a random quarter of the patches), deepvit
(re-attention), cct (convolutional tokenizer, stochastic depth, sequence pooling), maxvit
(MBConv with BatchNorm and squeeze-excitation, block and grid attention), t2t (tokens-to-token: nn.Unfold), levit
(conv stem, BatchNorm in attention), navit (NaViT: images of several sizes packed, token
dropout), xl (the
decoder as Transformer-XL: two segments a batch, detached memories carried across segments
and steps). `--feat
k=v;...` passes more options to x-transformers' Decoder (`w_k=v`: to TransformerWrapper).
"""

import argparse
import contextlib
import importlib.util
import sys
import types

import torch
import torch.nn.functional as F


@contextlib.contextmanager
def torchvision_stand_in():
    """vit_pytorch's __init__ imports its DINO trainer, which imports torchvision's
    transforms; none of the models here use it, and torchvision is not in this environment:
    a stand-in module while vit_pytorch imports, taken out again. Left in `sys.modules`, it
    outlived the script in a test worker that runs scripts in its own process, and a library
    imported later there read it as an installed torchvision with no spec (transformers'
    `find_spec`: "torchvision.__spec__ is None", test_setfit_clients.py)."""
    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        yield
        return
    tv = types.ModuleType("torchvision")
    tv.transforms = types.ModuleType("torchvision.transforms")
    sys.modules["torchvision"] = tv
    sys.modules["torchvision.transforms"] = tv.transforms
    try:
        import vit_pytorch  # noqa: F401  (its __init__, once, with the stand-in in place)
        yield
    finally:
        sys.modules.pop("torchvision", None)
        sys.modules.pop("torchvision.transforms", None)

VOCAB = 128


def build(args):
    case = args.case
    if case in ("gpt", "gpt_flash", "memtok", "xl"):
        from x_transformers import Decoder, TransformerWrapper
        kw = dict(dim=args.dim, depth=args.layers, heads=4, rotary_pos_emb=True, ff_glu=True,
                  attn_flash=(case == "gpt_flash"), attn_dropout=0.1, ff_dropout=0.1)
        extra = {}
        if case == "memtok":
            kw.update(use_rmsnorm=True, attn_qk_norm=True, residual_attn=True)
            kw.pop("rotary_pos_emb")
            extra = dict(num_memory_tokens=4)
        for k, v in feats(args.feat).items():   # w_: the wrapper's, the rest the Decoder's
            if k.startswith("w_"):
                extra[k[2:]] = v
            else:
                kw[k] = v
        if case == "xl":
            extra["max_mem_len"] = args.seq
        return TransformerWrapper(num_tokens=VOCAB, max_seq_len=args.seq,
                                  attn_layers=Decoder(**kw), **extra)
    if case == "xtransformer":
        from x_transformers import XTransformer
        return XTransformer(dim=args.dim, tie_token_emb=True, enc_num_tokens=VOCAB,
                            enc_depth=args.layers, enc_heads=4, enc_max_seq_len=args.seq,
                            dec_num_tokens=VOCAB, dec_depth=args.layers, dec_heads=4,
                            dec_max_seq_len=args.seq + 1)
    kw = dict(image_size=16, patch_size=4, num_classes=10, dim=args.dim, depth=args.layers,
              heads=4, mlp_dim=2 * args.dim, dim_head=16)
    with torchvision_stand_in():
        return _vit(case, args, kw)


def _vit(case, args, kw):
    if case == "vit":
        from vit_pytorch import ViT
        return ViT(dropout=0.1, emb_dropout=0.1, **kw)
    if case == "cait":
        from vit_pytorch.cait import CaiT
        kw.pop("depth")
        return CaiT(depth=args.layers, cls_depth=1, dropout=0.1, emb_dropout=0.1,
                    layer_dropout=0.0, **kw)
    if case == "vit_fft":
        from vit_pytorch.simple_vit_with_fft import SimpleViT
        return SimpleViT(freq_patch_size=4, **kw)
    if case == "vit_value_residual":
        from vit_pytorch.simple_vit_with_value_residual import SimpleViT
        return SimpleViT(**kw)
    if case == "vit_patch_dropout":
        from vit_pytorch.simple_vit_with_patch_dropout import SimpleViT
        return SimpleViT(patch_dropout=0.25, **kw)
    if case == "deepvit":
        from vit_pytorch.deepvit import DeepViT
        return DeepViT(dropout=0.1, **kw)
    if case == "cct":
        from vit_pytorch.cct import CCT
        return CCT(img_size=16, embedding_dim=args.dim, n_conv_layers=1, kernel_size=3,
                   stride=1, padding=1, pooling_kernel_size=3, pooling_stride=2,
                   pooling_padding=1, num_layers=args.layers, num_heads=2, mlp_ratio=2,
                   num_classes=10, positional_embedding="learnable")
    if case == "maxvit":
        from vit_pytorch.max_vit import MaxViT
        return MaxViT(num_classes=10, dim=args.dim, depth=(1, 1), dim_head=16,
                      window_size=2)
    if case == "t2t":
        from vit_pytorch.t2t import T2TViT
        return T2TViT(image_size=16, num_classes=10, dim=args.dim, depth=args.layers, heads=2,
                      mlp_dim=2 * args.dim, dim_head=16, t2t_layers=((3, 2), (3, 2)))
    if case == "levit":
        from vit_pytorch.levit import LeViT
        return LeViT(image_size=16, num_classes=10, dim=(args.dim, 2 * args.dim), depth=1,
                     heads=(2, 2), mlp_mult=2, stages=2, dim_key=16, dim_value=16)
    if case == "navit":
        from vit_pytorch.na_vit import NaViT
        return NaViT(token_dropout_prob=0.25, **kw)
    raise SystemExit(f"unknown case {case}")


def feats(text: str) -> dict:
    """`--feat "rotary_pos_emb=False;attn_kv_heads=2"`: more x-transformers options."""
    import ast
    out = {}
    for part in filter(None, text.split(";")):
        k, v = part.split("=", 1)
        out[k] = ast.literal_eval(v)
    return out


VITS = ("vit", "cait", "vit_fft", "vit_value_residual", "vit_patch_dropout", "deepvit", "cct",
        "maxvit", "t2t", "levit", "navit")


def batch(args, gen):
    if args.case == "maxvit":
        return (torch.randn(args.batch, 3, 32, 32, generator=gen),
                torch.randint(0, 10, (args.batch,), generator=gen))
    if args.case in VITS:
        return (torch.randn(args.batch, 3, 16, 16, generator=gen),
                torch.randint(0, 10, (args.batch,), generator=gen))
    if args.case == "xtransformer":
        return (torch.randint(0, VOCAB, (args.batch, args.seq), generator=gen),
                torch.randint(0, VOCAB, (args.batch, args.seq + 1), generator=gen))
    return (torch.randint(0, VOCAB, (args.batch, args.seq + 1), generator=gen), None)


MEMS = {}


def loss_of(args, model, x, y):
    if args.case == "xl":   # Transformer-XL: two segments, the memories carried on, detached
        loss = 0.0
        for seg in x.split(args.seq // 2 + 1, dim=1):
            if seg.shape[1] < 2:
                continue
            logits, MEMS["m"] = model(seg[:, :-1], mems=MEMS.get("m"), return_mems=True)
            loss = loss + F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                          seg[:, 1:].reshape(-1))
        return loss
    if args.case == "navit":   # NaViT: lists of images of their own sizes, packed
        imgs = [[x[0], x[1][:, :8, :12]], [x[1][:, :12, :8]]]
        return F.cross_entropy(model(imgs), torch.cat([y, y[:1]]))
    if args.case in VITS:
        return F.cross_entropy(model(x), y)
    if args.case == "xtransformer":
        return model(x, y)                       # AutoregressiveWrapper's own loss
    logits = model(x[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))


def optimizer(model, wd):
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=3e-4, betas=(0.9, 0.95))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", default="gpt")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--feat", default="")
    args = p.parse_args()

    torch.manual_seed(0)
    model = build(args)
    model.train()
    opt = optimizer(model, 0.1)
    gen = torch.Generator().manual_seed(1234)
    for step in range(args.steps):
        for _ in range(args.accum):
            x, y = batch(args, gen)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = loss_of(args, model, x, y) / args.accum
            loss.backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item() * args.accum:.4f}")


if __name__ == "__main__":
    main()
