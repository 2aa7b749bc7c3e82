"""Where a policy's added step time goes, per phase and per block, measured on a real model.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/added_time_parts.py --policy 'checkpoint:blocks.*'
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/added_time_parts.py --example cnn --policy 'offload:blocks.*'

One process builds the example's model (the tiny GPT by default) and runs training steps
with the baseline and the policy taking turns (memledger/measure/apply.py, as the
interleaved benchmark does), `--cycles` cycles of `--turn` steps each, the first step of a
turn untimed. Every timed step is split by thread CPU time into forward (model call),
loss, backward and optimizer, and, for each selected module, into its forward calls (module
hooks) and the re-run of its forward inside backward (the hooks of its children fire again
during the recompute: from the first child's start to the last child's end). It prints
per phase: baseline, policy, difference (median over timed steps), and per block: untraced
forward vs re-run time. This is how the parts of memledger's cost model were checked
(docs/accuracy.md, "Where the cost model's numbers come from").
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.modules import module as nn_module  # noqa: E402

from memledger.measure.apply import apply_policy, module_table  # noqa: E402
from memledger.replay.policies import parse_policy, resolve  # noqa: E402

clock = time.thread_time_ns


def timed_turn(model, policy: str, step, timed: int = 2) -> list[int]:
    """One turn of `policy` (memledger's own apply_policy; "none": plain): one untimed step
    (the first after a switch runs on an allocator shaped by the other mode), then `timed`
    steps, thread CPU ns each; the policy is removed after."""
    # check_save=False: a benchmark may name a save list nothing matches on purpose
    # (probes_vs_policies.py's `save=no_op`: selective keeping nothing)
    handle = apply_policy(model, parse_policy(policy), check_save=False) \
        if policy != "none" else None
    try:
        step()
        out = []
        for _ in range(timed):
            t0 = clock()
            step()
            out.append(clock() - t0)
        return out
    finally:
        if handle is not None:
            handle.remove()


def faults() -> int:
    """Minor page faults of this thread so far (first touches of fresh pages)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"train_{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gpt_setup(batch: int):
    g = _load("gpt")
    torch.manual_seed(0)
    cfg = g.GPTConfig()
    model = g.GPT(cfg)
    gen = torch.Generator().manual_seed(1234)
    data = torch.randint(cfg.vocab_size, (20_000,), generator=gen)

    def batch_fn():
        x, y = g.get_batch(data, batch, cfg.block_size, gen)
        return x, y

    def loss_fn(out, y):
        return F.cross_entropy(out.view(-1, out.size(-1)), y.view(-1))
    return model, batch_fn, loss_fn


def cnn_setup(batch: int):
    c = _load("cnn")
    torch.manual_seed(0)
    model = c.CNN()
    gen = torch.Generator().manual_seed(1234)

    def batch_fn():
        return (torch.randn(batch, 3, 32, 32, generator=gen),
                torch.randint(0, 10, (batch,), generator=gen))
    return model, batch_fn, F.cross_entropy


def mlp_setup(batch: int):
    m = _load("mlp")
    torch.manual_seed(0)
    model = m.MLP()
    gen = torch.Generator().manual_seed(1234)

    def batch_fn():
        return (torch.randn(batch, 256, generator=gen),
                torch.randint(0, 10, (batch,), generator=gen))
    return model, batch_fn, F.cross_entropy


SETUPS = {"gpt": (gpt_setup, 8), "cnn": (cnn_setup, 16), "mlp": (mlp_setup, 64)}


def training(example: str, steps: int = 3):
    """(model, batch_fn, step) for `example`: one thread, AdamW, `step()` one training step
    (fresh batch, the example's loss, zero_grad, backward, optimizer step), run `steps`
    times already so the process has settled."""
    torch.set_num_threads(1)
    setup, batch = SETUPS[example]
    model, batch_fn, loss_fn = setup(batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        x, y = batch_fn()
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(steps):
        step()
    return model, batch_fn, step


class PartTimer:
    """Forward-call and in-backward re-run times of the modules in `paths`."""

    def __init__(self, model, paths: list[str]) -> None:
        named = dict(model.named_modules())
        self.owner = {}           # id(module) -> selected path it belongs to (itself or child)
        for p in paths:
            for sub_name, sub in named[p].named_modules():
                self.owner.setdefault(id(sub), (p, sub_name == ""))
        self.phase = "fwd"
        self.fwd: dict[str, int] = {}
        self.rerun: dict[str, list[int]] = {}     # path -> [first start, last end]
        self._t0: dict[int, int] = {}
        self._hooks = [nn_module.register_module_forward_pre_hook(self._pre),
                       nn_module.register_module_forward_hook(self._post, always_call=True)]

    def reset(self, phase: str) -> None:
        self.phase = phase

    def _pre(self, m, args) -> None:
        hit = self.owner.get(id(m))
        if hit is None:
            return
        path, is_root = hit
        now = clock()
        if self.phase == "fwd" and is_root:
            self._t0[id(m)] = now
        elif self.phase == "bwd":
            span = self.rerun.setdefault(path, [now, now])
            span[1] = max(span[1], now)

    def _post(self, m, args, out) -> None:
        hit = self.owner.get(id(m))
        if hit is None:
            return
        path, is_root = hit
        now = clock()
        if self.phase == "fwd" and is_root and id(m) in self._t0:
            self.fwd[path] = self.fwd.get(path, 0) + now - self._t0.pop(id(m))
        elif self.phase == "bwd" and path in self.rerun:
            self.rerun[path][1] = now

    def take(self) -> tuple[dict, dict]:
        fwd = dict(self.fwd)
        rerun = {p: e - s for p, (s, e) in self.rerun.items()}
        self.fwd, self.rerun = {}, {}
        return fwd, rerun

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="checkpoint:blocks.*")
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--turn", type=int, default=3)
    ap.add_argument("--example", choices=list(SETUPS), default="gpt")
    ap.add_argument("--batch-size", type=int, help="default: the example's own")
    args = ap.parse_args()
    torch.set_num_threads(1)
    setup, batch = SETUPS[args.example]
    model, batch_fn, loss_fn = setup(args.batch_size or batch)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)   # state: as Adam
    model.train()
    policy = parse_policy(args.policy)
    paths = [r.path for r in resolve(policy, module_table(model))]
    timer = PartTimer(model, paths)
    rows: dict[str, list[dict]] = {"none": [], "policy": []}

    def step(which: str, record: bool) -> None:
        x, y = batch_fn()
        timer.reset("fwd")
        f0 = faults()
        t0 = clock()
        out = model(x)
        t1 = clock()
        loss = loss_fn(out, y)
        opt.zero_grad(set_to_none=True)
        t2 = clock()
        timer.reset("bwd")
        loss.backward()
        t3 = clock()
        timer.reset("off")
        opt.step()
        t4 = clock()
        f1 = faults()
        fwd, rerun = timer.take()
        if record:
            rows[which].append({"forward": t1 - t0, "loss": t2 - t1, "backward": t3 - t2,
                                "optimizer": t4 - t3, "step": t4 - t0, "faults": (f1 - f0) * 1e6,
                                "blocks_fwd": sum(fwd.values()),
                                "rerun": sum(rerun.values()), "per_fwd": fwd,
                                "per_rerun": rerun})

    for _ in range(3):
        step("none", False)
    for c in range(args.cycles + 1):
        for which in ("none", "policy"):
            handle = apply_policy(model, policy) if which == "policy" else None
            for k in range(args.turn):
                step(which, record=c > 0 and k > 0)
            if handle is not None:
                handle.remove()
    timer.remove()

    def med(which, key):
        return statistics.median(r[key] for r in rows[which]) / 1e6

    print(f"policy {policy.text()}: {len(rows['policy'])} timed steps each, thread CPU ms "
          f"(median)")
    print("| part | baseline | policy | difference |")
    print("|---|---:|---:|---:|")
    for key in ("forward", "loss", "backward", "optimizer", "step", "blocks_fwd", "rerun",
                "faults"):
        b, p = med("none", key), med("policy", key)
        print(f"| {key} | {b:.3f} | {p:.3f} | {p - b:+.3f} |")
    print("\n| block | forward (baseline) | forward (policy) | re-run in backward | re-run / fwd |")
    print("|---|---:|---:|---:|---:|")
    for path in paths:
        fb = statistics.median(r["per_fwd"].get(path, 0) for r in rows["none"]) / 1e6
        fp = statistics.median(r["per_fwd"].get(path, 0) for r in rows["policy"]) / 1e6
        rr = statistics.median(r["per_rerun"].get(path, 0) for r in rows["policy"]) / 1e6
        print(f"| {path} | {fb:.3f} | {fp:.3f} | {rr:.3f} | {rr / fb if fb else 0:.2f} |")


if __name__ == "__main__":
    main()
