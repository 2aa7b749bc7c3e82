"""coconut-pytorch (tests/clients/train_coconut.py): lucidrains' Chain of Continuous
Thought (`Coconut`): its decoder (`Transformer`: rotary positions, hyper-connection
residual streams, a value residual from the first layer, x-transformers' `Attend`) reads
the prompt plus the begin-of-thought tokens, then is called again `num_reasoning_steps - 1`
times on its own last hidden state (the "continuous thought") with the growing key/value
cache of the earlier calls, and once more on the last thought, the end-of-thought token
and the answer: several forward calls of one module per step, a sequence that grows.
Trained as its README does (`loss = model(prompt, answer); loss.backward()`), tiny sizes,
random tokens. Seeded, nothing downloaded.

    python tests/clients/train_coconut.py --steps 3
    memledger trace tests/clients/train_coconut.py --steps 2 -o c.ledger -- --latents 2
    memledger compare tests/clients/train_coconut.py -p 'checkpoint:model.layers.*' --

Options: `--model coconut|multi` (`multi`: the library's multi-stream Coconut),
`--reasoning N` reasoning steps (3), `--latents N` latents per step (1), `--streams N`
residual streams (4; 1 turns hyper-connections off), `--learn-bot` (the begin-of-thought
loss), `--lib-checkpoint` (the library's own `checkpoint_sequential` over the recurrent
calls), `--dim`, `--depth`, `--batch`, `--prompt`, `--answer` lengths, `--accum N`
(gradient accumulation), `--clip X` (clip_grad_norm_), `--optim adam|adamw|sgd`, `--amp` (the forward under
bfloat16 autocast),
`--ragged` (prompts and answers of several lengths, as lists),
`--generate` (the README's `model.generate` after each step, in eval),
`--bug no-zero-grad` (a loop that never zeroes the gradients), `--bug zero-in-accum`
(zero_grad inside the accumulation loop): the doctor's findings.
"""

import argparse
import contextlib
import random

import torch

from coconut_pytorch import Coconut


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="coconut", choices=["coconut", "multi"])
    p.add_argument("--reasoning", type=int, default=3)
    p.add_argument("--latents", type=int, default=1)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--learn-bot", action="store_true")
    p.add_argument("--lib-checkpoint", action="store_true")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--prompt", type=int, default=8)
    p.add_argument("--answer", type=int, default=4)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--optim", default="adam", choices=["adam", "adamw", "sgd"])
    p.add_argument("--generate", action="store_true")
    p.add_argument("--amp", action="store_true")
    p.add_argument("--ragged", action="store_true")
    p.add_argument("--bug", default="", choices=["", "no-zero-grad", "zero-in-accum"])
    args = p.parse_args()
    torch.manual_seed(0)
    random.seed(0)   # hyper-connections picks each layer's residual stream by random.randrange

    transformer = dict(num_tokens=args.tokens, dim=args.dim, depth=args.depth,
                       dim_head=8, heads=args.heads, num_residual_streams=args.streams)
    if args.model == "multi":
        from coconut_pytorch.multi_stream_coconut import Coconut as MultiCoconut
        model = MultiCoconut(num_reasoning_steps=args.reasoning, transformer=transformer,
                             num_latents_per_step=args.latents)
    else:
        model = Coconut(num_reasoning_steps=args.reasoning, transformer=transformer,
                        num_latents_per_step=args.latents, learn_begin_of_thought=args.learn_bot,
                        checkpoint=args.lib_checkpoint)
    if args.optim == "sgd":
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    elif args.optim == "adamw":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def amp():
        return torch.autocast("cpu", dtype=torch.bfloat16) if args.amp \
            else contextlib.nullcontext()

    model.train()
    for step in range(args.steps):
        for _ in range(args.accum):
            if args.bug == "zero-in-accum":
                optim.zero_grad()   # the bug: each micro-batch wipes the ones before it
            if args.ragged:   # variable lengths, as lists: the library pads them with -1
                prompt = [torch.randint(0, args.tokens, (args.prompt - i,))
                          for i in range(args.batch)]
                answer = [torch.randint(0, args.tokens, (args.answer - i % 2,))
                          for i in range(args.batch)]
            else:
                prompt = torch.randint(0, args.tokens, (args.batch, args.prompt))
                answer = torch.randint(0, args.tokens, (args.batch, args.answer))
            with amp():
                loss = model(prompt, answer)
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        if args.bug != "no-zero-grad":
            optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.generate:
            # the README's sampling: a forward under no_grad, then one decoder call per new
            # token on the key/value cache (Coconut.generate is decorated no_grad)
            model.eval()
            out = model.generate(torch.randint(0, args.tokens, (1, args.prompt)), max_length=4)
            model.train()
            print(f"sampled {out.tolist()}")


if __name__ == "__main__":
    main()
