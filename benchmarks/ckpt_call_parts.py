"""What one checkpointed call costs beside its re-run, per call and per save, in a real step.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ckpt_call_parts.py            # chains
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ckpt_call_parts.py --example gpt \
        --policy 'checkpoint:blocks.*' --policy 'checkpoint:**.mlp' --policy 'checkpoint:**.ln_1'

The cost model prices a checkpointed call as call + saves x save beside its re-run (Note
[Added time], memledger/replay/costs.py), with `call` from the trace's recompute probe on the
model's blocks less their saves x the calibration's `save`. This measures both parts in one
process, policies and the plain step taking turns (3 steps a turn, the first untimed),
thread CPU time, medians; "machinery per call" = (policy's added step time - the plain
forward of its regions) / calls.

- default: 4 blocks, each a sequence of regions `Linear(256) + k x sin` for k = 1, 4, 16,
  64 (k + 2 saves), each region checkpointed on its own: the slope over k is the cost per
  save inside a real step, the intercept the cost per call.
- `--example`: the named policies on one of benchmarks/added_time_parts.py's models.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from added_time_parts import timed_turn  # noqa: E402
from torch import nn  # noqa: E402

clock = time.thread_time_ns
KS = (1, 4, 16, 64)


class Chain(nn.Module):
    def __init__(self, k: int, d: int) -> None:
        super().__init__()
        self.k, self.lin = k, nn.Linear(d, d)

    def forward(self, x):
        x = self.lin(x)
        for _ in range(self.k):
            x = torch.sin(x)          # saves its input: one save per op
        return x


class Chains(nn.Module):
    def __init__(self, d: int = 256) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(*(Chain(k, d) for k in KS)) for _ in range(4))
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _regions(model: nn.Module, policy: str) -> list[str]:
    glob = policy.split(":", 1)[1]
    rx = "^" + re.escape(glob).replace(r"\*\*", ".*").replace(r"\*", "[^.]*") + "$"
    return [n for n, _ in model.named_modules() if n and re.match(rx, n)]


def _saves_per_call(model, step, paths: list[str]) -> float:
    named, depth, count = dict(model.named_modules()), [0], [0]
    hooks = [h for p in paths for h in (
        named[p].register_forward_pre_hook(lambda *a: depth.__setitem__(0, depth[0] + 1)),
        named[p].register_forward_hook(lambda *a: depth.__setitem__(0, depth[0] - 1)))]

    def pack(t):
        count[0] += depth[0] > 0
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    for h in hooks:
        h.remove()
    return count[0] / len(paths)


def _plain_forward_ns(model, step, paths: list[str]) -> int:
    named, marks = dict(model.named_modules()), []
    hooks = [h for p in paths for h in (
        named[p].register_forward_pre_hook(lambda *a: marks.append(clock())),
        named[p].register_forward_hook(lambda *a: marks.append(clock())))]
    step()
    for h in hooks:
        h.remove()
    return sum(marks[i + 1] - marks[i] for i in range(0, len(marks), 2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--example", help="a model of benchmarks/added_time_parts.py")
    ap.add_argument("--policy", action="append", help="with --example")
    ap.add_argument("--cycles", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.example:
        from added_time_parts import SETUPS

        setup, batch = SETUPS[args.example]
        model, batch_fn, loss_fn = setup(batch)
        policies = args.policy or ["checkpoint:blocks.*"]
    else:
        model, x = Chains(), torch.randn(64, 256)
        batch_fn, loss_fn = (lambda: (x, None)), (lambda out, y: out.sum())
        policies = [f"checkpoint:blocks.*.{i}" for i in range(len(KS))]
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)

    def step() -> None:
        inp, target = batch_fn()
        opt.zero_grad(set_to_none=True)
        loss_fn(model(inp), target).backward()
        opt.step()

    regions = {p: _regions(model, p) for p in policies}
    saves = {p: _saves_per_call(model, step, regions[p]) for p in policies}
    for _ in range(3):
        step()
    times: dict[str, list[int]] = {p: [] for p in ["none", *policies]}
    fwd: dict[str, list[int]] = {p: [] for p in policies}
    for cycle in range(args.cycles + 1):      # the first cycle is not counted
        for pol in times:
            ns = timed_turn(model, pol, step)
            if cycle:
                times[pol] += ns
        for pol in policies:
            f = _plain_forward_ns(model, step, regions[pol])
            if cycle:
                fwd[pol].append(f)
    base = statistics.median(times["none"])
    print(f"{args.example or 'chains'}: plain step {base / 1e6:.2f} ms, {args.cycles} cycles; "
          "thread CPU, medians, per call")
    print("| policy | calls | saves per call | added | plain forward | machinery |")
    print("|---|---:|---:|---:|---:|---:|")
    for pol in policies:
        n = len(regions[pol])
        added = (statistics.median(times[pol]) - base) / n / 1e3
        f = statistics.median(fwd[pol]) / n / 1e3
        print(f"| `{pol}` | {n} | {saves[pol]:.0f} | {added:.0f} us | {f:.0f} us | "
              f"{added - f:.0f} us |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
