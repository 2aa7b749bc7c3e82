"""HRM (HRM-pytorch, lucidrains' Hierarchical Reasoning Model) as its README writes it: a
low-level and a high-level x-transformers `Encoder` iterated `reasoning_steps x 2` times
per forward, each reading the token embedding and every hidden state through a
`CombineHiddens` (RMSNorm each, concat, project), every iteration but the last under
`torch.no_grad` (the one-step gradient approximation), the prediction from the high-level
hidden. Deep supervision as the README's two calls: each batch is trained over
`--segments` segments, each its own forward, backward and optimizer step, the hidden states
returned by one segment passed to the next (the model detaches them on entry). Seeded,
random tokens, tiny sizes, nothing downloaded.

    python tests/clients/train_hrm.py --steps 4 --segments 2
    memledger trace tests/clients/train_hrm.py --steps 2 -o hrm.ledger -- --segments 2
    memledger compare tests/clients/train_hrm.py -p 'checkpoint:networks.*' -- --segments 2

Options: `--act` (`HRM_ACT`: the adaptive-computation model, a Q head for halt / continue
read at each reasoning step's boundary with gradients on (its input from the no_grad
iterations), the ACT loss beside the main one), `--full-grad` (`one_step_grad=False`: backprop
through every iteration), `--opt atan2` (adam-atan2-pytorch's `AdamAtan2`, the paper's
optimizer; else Adam), `--infer` (after each batch, a prediction in eval mode under no_grad:
`HRM` with `reasoning_steps=1`, `HRM_ACT` with adaptive halting), `--causal`, `--clip`,
`--levels 3` (a third network, `relative_period` 2 between each level and the next).
Two loop bugs, for the doctor: `--keep-hiddens` (the script keeps every segment's returned
hidden states in a list, as for logging: each step's graph stays reachable) and
`--no-detach` (`detach_hiddens=False`: harmless under the one-step gradient, whose first
iteration reads the carried state under no_grad; with `--full-grad` the next segment's
backward runs into the last one's freed graph). The model returns the hidden states as a
`dict_values` view (`hiddens_dict.values()`); `--tuple` makes them a tuple first.
Heads are 2 (`attn_dim_head=8`, `dim=16`): with the README's `heads=1`, x-transformers
2.31 builds no output projection and the residual fails (8 != 16 channels).
"""

import argparse

import torch

from HRM import HRM, HRM_ACT


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--segments", type=int, default=2)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--reasoning", type=int, default=2)
    p.add_argument("--levels", type=int, default=2)
    p.add_argument("--act", action="store_true")
    p.add_argument("--full-grad", action="store_true")
    p.add_argument("--opt", default="adam", choices=["adam", "atan2"])
    p.add_argument("--infer", action="store_true")
    p.add_argument("--keep-hiddens", action="store_true")
    p.add_argument("--tuple", action="store_true")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--no-detach", action="store_true")
    p.add_argument("--clip", type=float, default=None)
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = 16
    net = dict(dim=args.dim, depth=args.depth, attn_dim_head=8, heads=2,
               use_rmsnorm=True, rotary_pos_emb=True, pre_norm=False)
    # low to high; `--levels 3` adds a third network, run every 4 low-level iterations
    nets = [dict(net, depth=args.depth + min(i, 1)) for i in range(args.levels)]
    common = dict(networks=nets,
                  num_tokens=num_tokens, dim=args.dim, causal=args.causal)
    if args.act:
        model = HRM_ACT(**common, max_reasoning_steps=args.reasoning)
        fwd_kw = {}
    else:
        model = HRM(**common, reasoning_steps=args.reasoning)
        fwd_kw = {}
    fwd_kw["one_step_grad"] = not args.full_grad
    if args.no_detach:
        fwd_kw["detach_hiddens"] = False
    if args.opt == "atan2":
        from adam_atan2_pytorch import AdamAtan2
        optim = AdamAtan2(model.parameters(), lr=1e-4)
    else:
        optim = torch.optim.Adam(model.parameters(), lr=1e-4)

    kept = []
    step = 0
    while step < args.steps:
        model.train()
        seq = torch.randint(0, num_tokens, (args.batch, args.seq_len))
        labels = torch.randint(0, num_tokens, (args.batch, args.seq_len))
        hiddens = None
        for segment in range(args.segments):
            # deep supervision: each segment its own update, the hiddens carried on
            loss, hiddens, _ = model(seq, hiddens=hiddens, labels=labels, **fwd_kw)
            if args.tuple:   # the model returns a `dict_values` view
                hiddens = tuple(hiddens)
            loss.backward()
            if args.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optim.step()
            optim.zero_grad()
            if args.keep_hiddens:
                kept.append(hiddens)
            print(f"step {step} segment {segment}  loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break
        if args.infer:
            model.eval()
            with torch.no_grad():
                if args.act:
                    pred, _, exits = model(seq)
                    print("exit steps", exits.tolist())
                else:
                    pred, _ = model(seq, reasoning_steps=1)
                print("pred", pred.argmax(-1)[0].tolist())


if __name__ == "__main__":
    main()
