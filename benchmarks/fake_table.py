"""Predicted peaks of large runs from fake ledgers, beside Korthikanti et al.'s formula.

    python benchmarks/fake_table.py        # about 6 minutes on a 2-core machine

For each (model, batch, sequence) the script runs the bundled example with `--fake`
(2 steps, bf16, target cuda, so sizes are rounded as the CUDA caching allocator does),
then replays it under `none` and `checkpoint` on every block. Beside it: the activation
bytes saved per layer (mean over layers, live at the end of forward) and Korthikanti et
al. (2022, "Reducing Activation Recomputation in Large Transformer Models", eq. 1) for
16-bit activations, no parallelism, no recomputation:

    per layer = s·b·h·(34 + 5·a·s/h) bytes
              = 34·s·b·h (LayerNorms, QKV, MLP, dropout masks) + 5·a·s²·b (scores, softmax,
                its dropout mask and output)

Prints a Markdown table for docs/fake.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name, script, args (without batch/seq), block glob, hidden h, heads a, layers L
MODELS = {
    "GPT-2 XL": ("train_gpt", ["--n-layer", "48", "--n-embd", "1600", "--n-head", "25",
                              "--vocab-size", "50257", "--dtype", "bf16"], "blocks.*",
                 1600, 25, 48),
    "Llama 1.1B": ("train_llama", ["--size", "1b", "--dtype", "bf16"], "layers.*", 2048, 32, 22),
    "Llama-2 7B": ("train_llama", ["--size", "7b", "--dtype", "bf16"], "layers.*", 4096, 32, 32),
}
RUNS = [("GPT-2 XL", 1, 1024), ("GPT-2 XL", 1, 2048), ("Llama 1.1B", 1, 2048),
        ("Llama 1.1B", 4, 2048), ("Llama-2 7B", 1, 2048), ("Llama-2 7B", 1, 4096)]


def trace(name: str, b: int, s: int):
    import memledger
    from memledger.trace.script import run_script
    script, args, *_ = MODELS[name]
    if script == "train_gpt":
        args = args + ["--batch-size", str(b), "--block-size", str(s)]
    else:
        args = args + ["--batch-size", str(b), "--seq-len", str(s)]
    argv, path = list(sys.argv), list(sys.path)
    try:
        with memledger.trace(fake=True, device="cuda") as led:
            run_script(ROOT / "examples" / f"{script}.py", args + ["--steps", "2"])
    finally:
        sys.argv[:], sys.path[:] = argv, path
    return led.ledger


def per_layer_saved(led, glob: str, layers: int) -> float:
    _, saved = led.saved_before_backward()
    prefix = glob.removesuffix("*")
    inside = saved[saved["saved_module"].astype(str).str.startswith(prefix)]
    return float(inside["bytes"].sum()) / layers


def main() -> None:
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    gib = 2 ** 30
    print("| model | B | S | peak, none | peak, checkpoint every block | +time (modelled) | "
          "saved / layer (ledger) | Korthikanti 34sbh + 5as²b | ledger / formula |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, b, s in RUNS:
        _, _, glob, h, a, layers = MODELS[name]
        led = trace(name, b, s)
        rep = predict(led, [parse_policy("none"), parse_policy(f"checkpoint:{glob}")])
        none, ck = rep.policies
        mine = per_layer_saved(led, glob, layers)
        formula = s * b * h * 34 + 5 * a * s * s * b
        print(f"| {name} | {b} | {s} | {none.peak_bytes / gib:.2f} GiB | "
              f"{ck.peak_bytes / gib:.2f} GiB | {ck.added_time_s * 1e3:.0f} ms | "
              f"{mine / 2**20:.0f} MiB | {formula / 2**20:.0f} MiB | {mine / formula:.2f} |",
              flush=True)
    print(f"\ntime: {rep.time_model}")


if __name__ == "__main__":
    main()
