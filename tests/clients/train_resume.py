"""A run resumed from a checkpoint, as most long trainings are: the model and the optimizer
come back from a file, and `optimizer.load_state_dict` keeps the loaded tensors as its
state. The checkpoint is written by this script first, as a previous run would have left
it (the model and AdamW's state after some steps, filled in without a step or a forward
here: those would be this run's), so nothing outside it is needed.

    python tests/clients/train_resume.py --format torch --steps 3
    memledger trace tests/clients/train_resume.py --steps 3 -- --format safetensors

`--format`: `torch` (`torch.save` / `torch.load`), `torch-mmap` (`torch.load(mmap=True)`),
`safetensors` (the model's weights by safetensors' `load_file`, assigned as the parameters;
the optimizer's state by `torch.load`), `from-pretrained` (a transformers Llama written by
`save_pretrained` and fine-tuned from `from_pretrained`, as nearly every fine-tune starts;
its weights are slices of the mapped safetensors file, loaded in a thread of its own).
"""
import argparse
import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 10))


def step(model: nn.Module, opt: torch.optim.Optimizer, g: torch.Generator) -> None:
    x, y = torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()


def write_pretrained(path: str) -> None:
    """The "pretrained" model: a tiny Llama, as `save_pretrained` writes it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   vocab_size=256, max_position_embeddings=64)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)


def fine_tune(path: str, steps: int, g: torch.Generator) -> None:
    import transformers

    model = transformers.LlamaForCausalLM.from_pretrained(path)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        ids = torch.randint(0, 256, (2, 32), generator=g)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--format", choices=["torch", "torch-mmap", "safetensors", "from-pretrained"],
                   default="torch")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--pretrained", default="",
                   help="from-pretrained: a directory save_pretrained wrote (else one is "
                        "written first; a --fake run cannot write one)")
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    with tempfile.TemporaryDirectory(prefix="memledger-resume-") as tmp:
        if args.format == "from-pretrained":
            if not args.pretrained:
                write_pretrained(tmp)
            return fine_tune(args.pretrained or tmp, args.steps, g)
        ckpt = os.path.join(tmp, "last.pt")
        previous = build()   # what the previous run left: weights and AdamW's state
        opt = torch.optim.AdamW(previous.parameters())
        for q in previous.parameters():
            opt.state[q] = {"step": torch.tensor(100.0), "exp_avg": torch.randn_like(q) * 1e-3,
                            "exp_avg_sq": torch.rand_like(q) * 1e-6}
        torch.save({"model": previous.state_dict(), "opt": opt.state_dict()}, ckpt)
        if args.format == "safetensors":
            from safetensors.torch import load_file, save_file

            save_file(previous.state_dict(), os.path.join(tmp, "model.safetensors"))
        del previous, opt

        model = build()
        if args.format == "safetensors":
            model.load_state_dict(load_file(os.path.join(tmp, "model.safetensors")),
                                  assign=True)
            state = torch.load(ckpt, weights_only=True)
        else:
            state = torch.load(ckpt, weights_only=True, mmap=args.format == "torch-mmap")
            model.load_state_dict(state["model"])
        opt = torch.optim.AdamW(model.parameters())
        opt.load_state_dict(state["opt"])
        del state
        for _ in range(args.steps):
            step(model, opt, g)


if __name__ == "__main__":
    main()
