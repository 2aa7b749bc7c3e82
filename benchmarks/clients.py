"""Predicted vs measured peak on real clients (transformers, peft), in fresh processes.

    .venv/bin/python benchmarks/clients.py                 # every client, markdown
    .venv/bin/python benchmarks/clients.py --client bert

The same path as the CLI: `memledger trace` (ledger pass + allocator pass, 2 steps), then
for each policy `memledger predict` and `memledger measure` (a fresh process, peak over
steps 1-2). A policy predict refuses is measured too, to show that measure refuses it the
same way. Prints one markdown table, ready for docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memledger.errors import MemledgerError, PolicyError  # noqa: E402
from memledger.ledger.model import Ledger  # noqa: E402
from memledger.measure.runner import measure_script  # noqa: E402
from memledger.replay.policies import parse_policy  # noqa: E402
from memledger.replay.predict import predict  # noqa: E402
from memledger.trace.session import trace_script  # noqa: E402

CLIENTS_DIR = ROOT / "tests" / "clients"
SHAPE = ["--layers", "2", "--hidden", "64", "--seq", "32", "--batch-size", "2", "--steps", "3"]


def _policies(blocks: str) -> list[str]:
    first, second = blocks.replace("*", "0"), blocks.replace("*", "1")
    return [f"checkpoint:{blocks}", f"selective:{blocks}", f"offload:{blocks}",
            f"checkpoint:{first}+offload:{second}"]


CLIENTS = {
    "gpt2": ("train_hf.py", ["--model", "gpt2", *SHAPE], _policies("transformer.h.*")),
    "gpt2-nocache": ("train_hf.py", ["--model", "gpt2", "--no-cache", *SHAPE],
                     _policies("transformer.h.*")),
    "llama": ("train_hf.py", ["--model", "llama", *SHAPE], _policies("model.layers.*")),
    "bert": ("train_hf.py", ["--model", "bert", *SHAPE], _policies("bert.encoder.layer.*")),
    "lora": ("train_lora.py", SHAPE, _policies("base_model.model.transformer.h.*")),
    "lora-nocache": ("train_lora.py", ["--no-cache", *SHAPE],
                     _policies("base_model.model.transformer.h.*")),
    "dropout-gpt": ("train_dropout_gpt.py", ["--steps", "3"], _policies("blocks.*")),
    # any transformers LM by model_type (train_auto.py defaults: 2 layers, hidden 64,
    # 4 heads, batch 4, T=32), with clipping, a OneCycle schedule and an EMA copy
    **{f"auto-{t}": ("train_auto.py", ["--model", t, "--steps", "3", "--clip", "1",
                                       "--sched", "--ema"], _policies(layers))
       for t, layers in (("qwen2", "model.layers.*"), ("mistral", "model.layers.*"),
                         ("gemma", "model.layers.*"), ("gpt_neox", "gpt_neox.layers.*"),
                         ("bloom", "transformer.h.*"), ("phi", "model.layers.*"),
                         ("opt", "model.decoder.layers.*"),
                         ("distilbert", "distilbert.transformer.layer.*"))},
    "detached": ("train_detached.py", ["--steps", "3"], []),
}


def run(name: str) -> list[str]:
    script, argv, pols = CLIENTS[name]
    path = CLIENTS_DIR / script
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.ledger"
        trace_script(path, argv, out, steps=2)
        led = Ledger.load(out)
    ledger, alloc = led.summary().peak.bytes, led.measured["peak_bytes"]
    rows = [f"| {name} | ledger vs allocator | {ledger:,} | {alloc:,} | "
            f"{(ledger - alloc) / alloc * 100:+.3f} % |"]
    for text in pols:
        pol = parse_policy(text)
        try:
            pred = predict(led, [pol], bandwidth=1e9).policies[0].peak_bytes
        except PolicyError as e:
            pred, why = None, str(e)
        try:
            meas = measure_script(path, argv, pol, steps=2, time_steps=1).peak_bytes
        except MemledgerError as e:
            meas, mwhy = None, str(e)
        if pred is None or meas is None:
            same = "same reason" if pred is None and meas is None and why == mwhy else \
                f"measure: {meas if meas is not None else mwhy}"
            rows.append(f"| {name} | `{text}` | refused | refused ({same}) | - |")
        else:
            rows.append(f"| {name} | `{text}` | {pred:,} | {meas:,} | "
                        f"{(pred - meas) / meas * 100:+.3f} % |")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", choices=list(CLIENTS), action="append")
    args = ap.parse_args()
    lines = ["| client | policy | predicted (or ledger) | measured (or allocator) | error |",
             "|---|---|---:|---:|---:|"]
    for name in args.client or list(CLIENTS):
        lines += run(name)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
