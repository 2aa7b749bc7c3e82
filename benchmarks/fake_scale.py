"""Fake runs at full scale: memledger `--fake` against torch's MemTracker under
FakeTensorMode, side by side, one AdamW step of GPT-2 XL and of Llama-7B in bf16, B=1,
S=2048. Each (tool, model) runs in its own fresh process; wall time and max RSS come from
`os.wait4` on that process.

    python benchmarks/fake_scale.py            # about 5 minutes on a 2-core machine

Both tools run the same function: build the model under the tool (bf16 as the default
dtype, so parameters are born bf16 and no `.to()` is needed: MemTracker's plain
FakeTensorMode cannot swap fake parameters), one forward, cross-entropy, backward and
AdamW step. Printed: both peaks (must be equal to the byte), memledger's parameter /
gradient / AdamW-state bytes against 2Ψ / 2Ψ / 4Ψ (+ 4 B per parameter tensor for the
fp32 `step` counters), and time and RSS of each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODELS = ("gpt2-xl", "llama-7b")
SMOKE = ("gpt-tiny", "llama-tiny")   # same code at tiny size: a quick check of the harness
B, S = 1, 2048


def _example(name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(model: str):
    import torch
    if model in SMOKE:
        ex = _example("train_" + model.split("-")[0])
        if model == "gpt-tiny":
            return ex.GPT(ex.GPTConfig(block_size=S)), 512
        return ex.Llama(ex.LlamaConfig(max_seq_len=S)), 256
    if model == "gpt2-xl":
        ex = _example("train_gpt")
        return ex.GPT(ex.GPTConfig(vocab_size=50257, block_size=S, n_layer=48, n_head=25,
                                   n_embd=1600, dropout=0.1)), 50257
    ex = _example("train_llama")
    return ex.Llama(ex.SIZES["7b"]), 32000


def one_step(model_name: str) -> tuple:
    import torch
    import torch.nn.functional as F
    torch.set_default_dtype(torch.bfloat16)   # parameters born bf16
    model, vocab = build(model_name)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(vocab, (B, S))
    y = torch.randint(vocab, (B, S))
    logits = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
    loss.backward()
    opt.step()
    psi = sum(p.numel() for p in model.parameters())
    return psi, len(list(model.parameters()))


def child(tool: str, model_name: str) -> dict:
    t0 = time.perf_counter()
    if tool == "memledger":
        import memledger
        with memledger.trace(fake=True) as led:
            psi, n_tensors = one_step(model_name)
        led = led.ledger
        pk = led.peak()
        at = led.at_peak()
        cats = {c: int(led.storages.loc[led.storages["category"] == c, "bytes"].sum())
                for c in ("parameter", "gradient", "optimizer_state")}
        return {"peak": pk.bytes, "phase": pk.phase, "at_peak": at, "totals": cats,
                "psi": psi, "n_tensors": n_tensors, "events": led.n_events,
                "wall_s": time.perf_counter() - t0}
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    with FakeTensorMode():
        mt = MemTracker()
        with mt:
            psi, n_tensors = one_step(model_name)
        peak = mt.get_tracker_snapshot("peak")
    totals = {str(d): v["Total"] for d, v in peak.items()}
    return {"peak": max(totals.values()), "by_device": totals, "psi": psi,
            "wall_s": time.perf_counter() - t0}


def run(tool: str, model_name: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", tool, "--model", model_name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{tool} {model_name} failed:\n{err.decode()[-3000:]}")
    res = json.loads(out.decode().strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    res["rss_mib"] = ru.ru_maxrss / 1024
    return res


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", choices=["memledger", "memtracker"])
    p.add_argument("--model", choices=MODELS + SMOKE)
    p.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS + SMOKE)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.model)))
        return
    print(f"one AdamW step, bf16, B={B}, S={S}, fake (FakeTensorMode), {os.cpu_count()} CPUs")
    print(f"{'model':9} {'Ψ':>13} {'memledger peak':>16} {'MemTracker peak':>16} {'equal':>5} "
          f"{'params=2Ψ':>9} {'grads=2Ψ':>8} {'adam=4Ψ+4n':>10} {'ml s':>6} {'mt s':>6} "
          f"{'×':>5} {'ml RSS':>8} {'mt RSS':>8}")
    for m in args.models:
        ml, mt = run("memledger", m), run("memtracker", m)
        psi, n = ml["psi"], ml["n_tensors"]
        t = ml["totals"]
        print(f"{m:9} {psi:>13,} {ml['peak']:>16,} {mt['peak']:>16,} "
              f"{str(ml['peak'] == mt['peak']):>5} {str(t['parameter'] == 2 * psi):>9} "
              f"{str(t['gradient'] == 2 * psi):>8} "
              f"{str(t['optimizer_state'] == 4 * psi + 4 * n):>10} "
              f"{ml['process_s']:>6.1f} {mt['process_s']:>6.1f} "
              f"{mt['process_s'] / ml['process_s']:>5.1f} {ml['rss_mib']:>6.0f}Mi "
              f"{mt['rss_mib']:>6.0f}Mi")
        print(f"  memledger peak in {ml['phase']}, {ml['events']:,} events; at the peak: "
              + ", ".join(f"{k} {v:,}" for k, v in ml["at_peak"].items() if v))
        print(f"  MemTracker by device: {mt['by_device']}")


if __name__ == "__main__":
    main()
