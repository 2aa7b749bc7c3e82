"""Saved bytes vs recompute: memledger's op-level selective checkpointing and plan's front
against torch's own `activation_memory_budget` partitioner, on the tiny GPT.

    .venv/bin/python benchmarks/selective_vs_torch.py            # ~3 min on 2 shared cores

torch: the model (examples/train_gpt.py, same config and seed) compiled with
`torch.compile(backend="aot_eager_decomp_partition")` (AOTAutograd's min-cut partitioner,
no code generation) at each `torch._functorch.config.activation_memory_budget`; saved bytes
= distinct non-parameter storages its compiled forward saves (a saved-tensor hook counts
them); recompute = its training step's thread CPU time minus that at budget 1.0 (median of
`--steps` steps).

memledger: one ledger of the example (`memledger trace`); for each point, saved bytes =
activations live when backward starts (replay's probe) and the predicted added time (no
run). Rows: selective on every block keeping the first k op kinds of the bytes-per-second
ranking (memledger/replay/block_options.py, Note [Op-level selective]), checkpoint on every
block, and plan's Pareto front (every per-block mix).

One thread (OMP_NUM_THREADS=1), CPU time: see benchmarks/accuracy.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402

BUDGETS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.0)


def torch_points(steps: int) -> list[tuple[float, int, float]]:
    import torch._functorch.config as fconf
    import torch.nn.functional as F

    from train_gpt import GPT, GPTConfig, get_batch

    out = []
    for budget in BUDGETS:
        torch._dynamo.reset()
        fconf.activation_memory_budget = budget
        torch.manual_seed(0)
        cfg = GPTConfig()
        model = GPT(cfg)
        compiled = torch.compile(model, backend="aot_eager_decomp_partition")
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        gen = torch.Generator().manual_seed(1234)
        data = torch.randint(cfg.vocab_size, (20_000,), generator=gen)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        saved: dict[int, int] = {}

        def pack(t):
            st = t.untyped_storage()
            if st.data_ptr() not in params:
                saved[st.data_ptr()] = st.nbytes()
            return t

        times = []
        for i in range(steps + 2):
            x, y = get_batch(data, 8, cfg.block_size, gen)
            t0 = time.thread_time()
            if i == 1:
                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    logits = compiled(x)
            else:
                logits = compiled(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if i >= 2:                      # step 0 compiles, step 1 counts saved bytes
                times.append(time.thread_time() - t0)
        out.append((budget, sum(saved.values()), statistics.median(times)))
        print(f"torch budget {budget}: saved {sum(saved.values()):,} B, step "
              f"{out[-1][2] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    return out


def memledger_points() -> list[tuple[str, int, float]]:
    from memledger.ledger.model import Ledger
    from memledger.replay.block_options import op_ranking
    from memledger.replay.engine import CPU_RNG_STATE_BYTES, replay
    from memledger.replay.plan import pareto_points, repeated_blocks
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict
    from memledger.replay.prepared import Prepared
    from memledger.trace.session import trace_script

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gpt.ledger"
        trace_script(ROOT / "examples/train_gpt.py", [], path, steps=3)
        led = Ledger.load(path)
    prep = Prepared.from_ledger(led)
    blocks = repeated_blocks(led)
    ranked = [name for name, _, ns in op_ranking(prep, blocks) if ns > 0]
    texts = ["none"] + [f"selective:@Block:save={','.join(ranked[:k])}"
                        for k in range(1, len(ranked) + 1)] + ["checkpoint:@Block"]
    front = [p["policy"] for p in pareto_points(led, points=12)]
    texts += [t for t in front if t not in texts]
    # saved bytes: activations live at the first backward event (forward done)
    bw = int(led.phases.loc[led.phases["phase"] == "backward", "ev"].iloc[-1]) - 1
    rep = predict(led, [parse_policy(t) for t in texts], prep=prep)
    out = []
    for t, p in zip(texts, rep.policies):
        r = replay(prep, parse_policy(t), rng_bytes=CPU_RNG_STATE_BYTES, probe=bw)
        out.append((("front: " if t in front and t not in texts[:len(ranked) + 2] else "")
                    + t, r.at_probe["activation"], p.added_time_s))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    mine = memledger_points()
    theirs = torch_points(args.steps)
    base = theirs[0][2]
    print("| torch activation_memory_budget | saved bytes | measured recompute (CPU) |")
    print("|---:|---:|---:|")
    for b, saved, step in theirs:
        print(f"| {b:.1f} | {saved:,} | {(step - base) * 1e3:+.2f} ms |")
    print()
    print("| memledger policy | saved bytes (replay) | predicted added time |")
    print("|---|---:|---:|")
    for t, saved, added in mine:
        print(f"| `{t}` | {saved:,} | {added * 1e3:+.2f} ms |")


if __name__ == "__main__":
    main()
