"""The CUDA paths, checked in one run on a GPU machine; prints a short table.

    pip install -e . && python benchmarks/gpu_check.py [--out DIR]

CI has no GPU: this script is how the CUDA code is exercised (see docs/gpu.md for the
last recorded run). Without CUDA it says so and exits 0. It checks:

1. `memledger trace` of each example on `cuda`: the ledger's tracked peak against the
   caching allocator's `max_memory_allocated` (the allocator pass), reserved bytes and
   fragmentation, and the gradient/optimizer-state counts on the GPU;
2. the in-process API (`memledger.trace()`) on CUDA, measured with the allocator counters;
3. OOM capture: a script that asks for far more than the GPU has; the ledger must end with
   status "error" and an `oom` record holding the allocator's counters;
4. policies on CUDA (checkpoint; offload to pinned host memory on a side stream): the
   measured peak (`max_memory_allocated`) and step time against replay's prediction;
5. `memledger import` of the allocator snapshot trace wrote beside the GPT ledger, and
   `memledger compare`'s gates on CUDA (relative tolerance 1e-5);
6. `trace --fake --device cuda` of each example against its real CUDA run (docs/fake.md);
7. warm starts on CUDA (Note [Warm starts], memledger/processes.py; on where an NVIDIA
   driver is since this check passed on an H200): `measure` of the GPT under checkpoint
   from a zygote's children (MEMLEDGER_WARM_START=force) and from a fresh process must
   read the same peak;
8. transformers GPT-2 and Llama built from config (tests/clients/train_hf.py): ledger
   against the allocator, checkpoint predicted against measured;
9. where a checkpoint prediction's gap lies: the GPT and GPT-2 traced for real *under* the
   policy (with the allocator pass), so the gap splits into tensors (the traced peak and its
   categories against replay's) and bytes no tensor holds (workspace against the baseline's).
   The ledgers and snapshots stay in `--out` for reading at leisure on a CPU machine;
10. what the bytes no tensor holds are: in a fresh process, the allocator's bytes left once
   every tensor is gone after a forward matmul (the script's thread) and its backward (the
   autograd engine's thread), and what `torch._C._cuda_clearCublasWorkspaces()` gives back.

`--device cpu` runs every check that has a CPU counterpart here, as a dry run (about 90 s):
run it before spending lent GPU time. `--budget-s` starts no check after that many seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cuda"   # --device; cpu is a dry run of the same paths
sys.path.insert(0, str(ROOT))

OOM_SCRIPT = """
import torch
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 64, device="cuda")).sum().backward()
opt.step()
too_much = torch.empty(1 << 50, dtype=torch.uint8, device="cuda")   # 1 PiB
"""


def _workspace(led) -> int:
    """What replay carries to every policy's peak: the allocator's peak beyond the ledger's
    tensors and the kernel scratch placed op by op (Note [Kernel scratch on a GPU])."""
    return led.workspace_bytes(led.peak_with_scratch())


def _rounding(m: dict) -> str:
    """Allocated peak - requested peak (Note [Blocks larger than asked])."""
    if "requested_peak_bytes" not in m:
        return "-"
    return f"{m['peak_bytes'] - m['requested_peak_bytes']:,} B"


def _row(*cells) -> str:
    return "  ".join(f"{c:>14}" if i else f"{c:<26}" for i, c in enumerate(cells))


def check_examples(out: Path) -> list[str]:
    from memledger.ledger.model import Ledger
    from memledger.trace.session import trace_script
    from memledger.units import format_bytes

    # workspace = allocated peak - the ledger's peak with the kernels' scratch: bytes no
    # tensor holds (cuBLAS's workspace, the allocator's rounding), carried by replay to every
    # policy's peak; op scratch = what the scratch placed op by op adds at the ledger's peak
    rows = [_row("case", "ledger peak", "allocated pk", "workspace", "of it cuBLAS",
                 "op scratch", "rounding >=", "reserved pk", "trace s")]
    for name in ("mlp", "gpt", "cnn"):
        t0 = time.perf_counter()
        res = trace_script(ROOT / "examples" / f"train_{name}.py", ["--device", DEVICE],
                           out / f"{name}-{DEVICE}.ledger", steps=3)
        dt = time.perf_counter() - t0
        led = Ledger.load(res.ledger_path)
        m = led.measured or {}
        peak = led.peak().bytes
        rows.append(_row(f"trace {name} ({led.device})", format_bytes(peak),
                         format_bytes(m.get("peak_bytes", 0)),
                         f"{_workspace(led):,} B",
                         f"{m.get('cublas_workspace_bytes', 0):,} B",   # Note [The cuBLAS
                         f"{led.peak_with_scratch() - peak:,} B",        # workspace]
                         _rounding(m),   # Note [Blocks larger than asked]
                         format_bytes(m.get("reserved_peak_bytes", 0)), f"{dt:.1f}"))
    return rows


def check_api() -> list[str]:
    import torch

    import memledger
    from memledger.units import format_bytes

    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).to(DEVICE)
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(256, 1024, device=DEVICE)
    with memledger.trace() as led:
        for _ in range(2):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    s = led.summary()
    p_bytes = sum(p.numel() * 4 for p in model.parameters())
    # Adam keeps its `step` counters on the CPU for CUDA params (unless fused/capturable):
    # only exp_avg and exp_avg_sq are on the GPU.
    counters = sum(st["step"].numel() * st["step"].element_size()
                   for st in opt.state.values() if st["step"].device.type == DEVICE)
    ok = s.resident["optimizer_state"] == 2 * p_bytes + counters
    return [_row(f"api Adam MLP ({DEVICE})", format_bytes(s.peak.bytes),
                 format_bytes(s.measured.peak_bytes), s.measured.source,
                 f"{s.peak.bytes / max(1, s.measured.peak_bytes):.4f}",
                 "state exact" if ok else "STATE WRONG")]


def check_oom(out: Path) -> list[str]:
    from memledger.errors import ScriptError
    from memledger.ledger.model import Ledger
    from memledger.trace.session import trace_script

    script = out / "oom.py"
    script.write_text(textwrap.dedent(OOM_SCRIPT))
    code = 0
    try:
        trace_script(script, [], out / "oom.ledger", steps=5)
    except ScriptError as e:
        code = e.exit_code
    led = Ledger.load(out / "oom.ledger")
    ooms = led.extra.get("oom", [])
    status = (led.end or {}).get("status")
    ok = code == 3 and status == "error" and ooms and ooms[0]["num_ooms"] >= 1
    return [_row("oom capture", f"exit {code}", f"status {status}",
                 f"oom records {len(ooms)}", "", "ok" if ok else "MISSING")]


def check_policies(out: Path) -> list[str]:
    from memledger.ledger.model import Ledger
    from memledger.measure.runner import measure_script
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict
    from memledger.units import format_bytes

    script = ROOT / "examples" / "train_gpt.py"
    led = Ledger.load(out / f"gpt-{DEVICE}.ledger")
    texts = ["none", "checkpoint:blocks.*", "offload:blocks.*", "selective:blocks.*"]
    pred = {p.policy: p for p in predict(led, [parse_policy(t) for t in texts]).policies}
    rows = [_row(f"policy (gpt, {DEVICE})", "predicted pk", "measured pk", "pred/meas",
                 "pred - meas", "step ms")]
    for t in texts:
        policy = parse_policy(t)
        m = measure_script(script, ["--device", DEVICE, "--steps", "12"], policy,
                           steps=3, time_steps=5)
        p = pred[str(policy)]
        rows.append(_row(t, format_bytes(p.peak_bytes), format_bytes(m.peak_bytes),
                         f"{p.peak_bytes / max(1, m.peak_bytes):.4f}",
                         f"{p.peak_bytes - m.peak_bytes:+,} B", f"{m.step_time_s * 1e3:.2f}"))
    return rows


def check_clients(out: Path) -> list[str]:
    """transformers models built from config (tests/clients/train_hf.py), as users run them:
    the ledger against the allocator, and checkpoint's prediction against its measurement."""
    from memledger.ledger.model import Ledger
    from memledger.measure.runner import measure_script
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict
    from memledger.trace.session import trace_script
    from memledger.units import format_bytes

    script = ROOT / "tests" / "clients" / "train_hf.py"
    rows = [_row(f"client ({DEVICE})", "ledger peak", "allocated pk", "workspace",
                 "ckpt pred/meas", "ckpt pred - meas")]
    for model, layers in (("gpt2", "transformer.h.*"), ("llama", "model.layers.*")):
        argv = ["--model", model, "--device", DEVICE, "--layers", "4", "--hidden", "256",
                "--heads", "4", "--seq", "128", "--batch-size", "8", "--vocab", "1024",
                "--steps", "8", "--no-cache"]
        path = out / f"{model}-{DEVICE}.ledger"   # check_checkpoint_gap's, when it ran
        if not path.exists():
            trace_script(script, argv, path, steps=2)
        led = Ledger.load(path)
        alloc = (led.measured or {}).get("peak_bytes", 0)
        policy = parse_policy(f"checkpoint:{layers}")
        p = predict(led, [policy]).policies[-1]
        m = measure_script(script, argv, policy, steps=2, time_steps=2)
        rows.append(_row(f"{model} 4x256", format_bytes(led.peak().bytes), format_bytes(alloc),
                         f"{_workspace(led):,} B",
                         f"{p.peak_bytes / max(1, m.peak_bytes):.4f}",
                         f"{p.peak_bytes - m.peak_bytes:+,} B"))
    return rows


UNDER_POLICY = """
import runpy, sys
from memledger.measure.apply import install_policy
from memledger.replay.policies import parse_policy
policy, script = sys.argv[1], sys.argv[2]
install_policy(parse_policy(policy))
sys.argv = sys.argv[2:]
sys.path.insert(0, str(__import__("pathlib").Path(script).parent))
runpy.run_path(script, run_name="__main__")
"""


def check_checkpoint_gap(out: Path) -> list[str]:
    """Each case traced for real under its checkpoint policy: predicted peak against the
    measured one, split into tensors and workspace, and the categories that differ most."""
    from memledger.ledger.model import Ledger
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict
    from memledger.trace.session import trace_script
    from memledger.units import format_bytes

    wrapper = out / "under_policy.py"
    wrapper.write_text(textwrap.dedent(UNDER_POLICY))
    hf = ["--device", DEVICE, "--layers", "4", "--hidden", "256", "--heads", "4", "--seq",
          "128", "--batch-size", "8", "--vocab", "1024", "--steps", "8", "--no-cache"]
    cases = (("gpt", ROOT / "examples" / "train_gpt.py", ["--device", DEVICE],
              "checkpoint:blocks.*", 3),
             ("gpt2", ROOT / "tests" / "clients" / "train_hf.py", ["--model", "gpt2", *hf],
              "checkpoint:transformer.h.*", 2))
    import json

    rows = [_row(f"ckpt gap ({DEVICE})", "pred - meas", "tensors", "workspace", "meas pk",
                 "peak: pred/real")]
    for name, script, argv, text, steps in cases:
        base_path = out / f"{name}-{DEVICE}.ledger"
        if not base_path.exists():
            trace_script(script, argv, base_path, steps=steps)
        base = Ledger.load(base_path)
        p = predict(base, [parse_policy(text)]).policies[-1]
        res = trace_script(wrapper, [text, str(script), *argv],
                           out / f"{name}-under-ckpt.ledger", steps=steps)
        real = Ledger.load(res.ledger_path)
        meas = (real.measured or {}).get("peak_bytes", 0)
        # tensors and the kernel scratch placed op by op, then the rest
        tensors = p.peak_bytes - _workspace(base) - real.peak_with_scratch()
        work = _workspace(base) - _workspace(real)
        # categories are not like for like (the real run's re-run outputs are temporaries
        # to its tracer): kept in a file beside the ledgers, for reading with them
        real_peak = real.peak()
        (out / f"{name}-gap.json").write_text(json.dumps({
            "predicted": p.model_dump(), "measured": real.measured,
            "real_peak": {"bytes": real_peak.bytes, "event": real_peak.event,
                          "phase": real_peak.phase, "op": real_peak.op,
                          "module": real_peak.module},
            "real_at_peak": real.at_peak(), "base_workspace": _workspace(base),
            "real_workspace": _workspace(real)}, indent=1, default=str))
        rows.append(_row(f"{name} {text.split(':')[0]}", f"{p.peak_bytes - meas:+,} B",
                         f"{tensors:+,} B", f"{work:+,} B", format_bytes(meas),
                         f"{p.peak_phase}/{real_peak.phase}"))
    return rows


WORKSPACE_PROBE = """
import json, sys, torch
dev = sys.argv[1]
mem = (lambda: torch.cuda.memory_allocated()) if dev == "cuda" else (lambda: 0)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
got = {"start": mem()}
x = torch.randn(256, 256, device=dev, requires_grad=True)
w = torch.randn(256, 256, device=dev, requires_grad=True)
y = x @ w
sync(); got["tensors after forward"] = mem()
y.sum().backward()
sync(); got["tensors after backward"] = mem()
del x, w, y
sync(); got["no tensor left"] = mem()
if dev == "cuda":
    torch._C._cuda_clearCublasWorkspaces()
sync(); got["after clearing cuBLAS workspaces"] = mem()
print(json.dumps(got))
"""


def check_workspace(out: Path) -> list[str]:
    """The bytes that no tensor holds, taken apart in a fresh process (no earlier matmul)."""
    import json
    import subprocess

    probe = out / "workspace_probe.py"
    probe.write_text(textwrap.dedent(WORKSPACE_PROBE))
    got = json.loads(subprocess.run([sys.executable, str(probe), DEVICE], check=True,
                                    capture_output=True, text=True).stdout.splitlines()[-1])
    left, cleared = got["no tensor left"], got["after clearing cuBLAS workspaces"]
    return [_row(f"workspace ({DEVICE})", "no tensor left", "cleared", "left after",
                 "after fwd", "after bwd"),
            _row("matmul 256x256", f"{left:,} B", f"{left - cleared:,} B", f"{cleared:,} B",
                 f"{got['tensors after forward']:,} B", f"{got['tensors after backward']:,} B")]


def check_import_and_compare(out: Path) -> list[str]:
    """The allocator snapshot that trace left beside the GPT ledger, through `import`; and
    the correctness gates of `compare` on CUDA (documented tolerance, no performance)."""
    from memledger.cli import main as cli

    rows = []
    snap = out / "gpt-cuda.ledger.cuda-snapshot.pickle"
    code = cli(["import", str(snap), "-o", str(out / "gpt-snapshot.ledger")])
    rows.append(_row("import cuda snapshot", f"exit {code}", "", "", "",
                     "ok" if code == 0 else "FAILED"))
    code = cli(["compare", str(ROOT / "examples" / "train_gpt.py"), "--policy",
                "checkpoint:blocks.*", "--policy", "offload:blocks.*", "--steps", "2",
                "--no-performance", "--", "--device", DEVICE, "--steps", "6"])
    rows.append(_row("compare gates (cuda)", f"exit {code}", "", "", "",
                     "ok" if code == 0 else "REJECTED/FAILED"))
    return rows


def check_fake(out: Path) -> list[str]:
    """`trace --fake --device cuda` against the real CUDA run of the same example: the fake
    peak against the real ledger's peak with every size rounded to 512 B (what the fake
    ledger does, Note [Fake runs] Rule 5) and against the allocator's max_memory_allocated;
    and the largest per-category difference at the peak."""
    import numpy as np

    from memledger.ledger.model import Ledger
    from memledger.trace.session import trace_script
    from memledger.units import format_bytes

    rows = [_row(f"fake vs real ({DEVICE})", "fake peak", "real rounded", "allocated pk",
                 "fake/alloc", "max cat diff")]
    for name in ("mlp", "gpt", "cnn"):
        real_path = out / f"{name}-{DEVICE}.ledger"
        if not real_path.exists():
            trace_script(ROOT / "examples" / f"train_{name}.py", ["--device", DEVICE],
                         real_path, steps=3)
        res = trace_script(ROOT / "examples" / f"train_{name}.py", ["--device", DEVICE],
                           out / f"{name}-fake.ledger", steps=3, fake=True, device=DEVICE)
        fake, real = Ledger.load(res.ledger_path), Ledger.load(real_path)
        st = real.storages
        st["bytes"] = np.where(st["bytes"] > 0, -(-st["bytes"] // 512) * 512, 0)
        real.__dict__.pop("_device", None)
        alloc = (real.measured or {}).get("peak_bytes", 0)
        fa, ra = fake.at_peak(), real.at_peak()
        diff = max(abs(fa[c] - ra[c]) for c in fa if c != "workspace")
        rows.append(_row(f"fake {name} ({fake.header.get('fake_kernels')} kernels)",
                         format_bytes(fake.peak().bytes), format_bytes(real.peak().bytes),
                         format_bytes(alloc), f"{fake.peak().bytes / max(alloc, 1):.4f}",
                         f"{diff:,} B"))
    return rows


def check_warm_start(out: Path) -> list[str]:
    """The same measured run started warm twice and cold once: equal CUDA peaks, exit 0."""
    import os

    from memledger.measure.runner import measure_script
    from memledger.replay.policies import Policy

    script, argv = ROOT / "examples" / "train_gpt.py", ["--device", DEVICE, "--steps", "8"]
    pol = Policy.parse("checkpoint:blocks.*")
    peaks, secs = {}, {}
    for mode in ("force", "force", "0"):
        os.environ["MEMLEDGER_WARM_START"] = mode
        t0 = time.perf_counter()
        peaks.setdefault(mode, []).append(measure_script(script, argv, pol, steps=2,
                                                         time_steps=2).peak_bytes)
        secs.setdefault(mode, []).append(time.perf_counter() - t0)
    os.environ.pop("MEMLEDGER_WARM_START")
    same = len(set(peaks["force"] + peaks["0"])) == 1
    return [_row(f"warm start ({DEVICE})", f"warm {peaks['force'][-1]:,}", f"cold {peaks['0'][0]:,}",
                 f"{secs['force'][-1]:.1f} s warm", f"{secs['0'][0]:.1f} s cold",
                 "ok" if same else "DIFFERENT")]


# Most wanted first: a run cut short by --budget-s skips the checks already seen to pass.
CHECKS = ("check_examples", "check_policies", "check_checkpoint_gap", "check_workspace",
          "check_clients", "check_warm_start", "check_fake", "check_api", "check_oom",
          "check_import_and_compare")
CUDA_ONLY = {"check_oom", "check_import_and_compare"}   # no CPU counterpart to run


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None, help="folder for the ledgers (default: a temp dir)")
    p.add_argument("--device", default="cuda",
                   help="cuda (the check); cpu runs the same code paths here, as a dry run "
                        "that finds a check broken before device time is spent on it")
    p.add_argument("--budget-s", type=float, default=210.0,
                   help="start no further check after this many seconds (lent GPU time is short)")
    p.add_argument("--only", default="", help="comma-separated check names (default: all)")
    args = p.parse_args()
    import torch

    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; nothing to check")
        return 0
    out = Path(args.out or tempfile.mkdtemp(prefix="memledger-gpu-"))
    out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu dry run"
    print(f"torch {torch.__version__}, {name}", flush=True)
    # Each check's rows print as they come and each failure is one row: a run cut short by
    # its time limit still leaves every row it reached.
    t_start, rows = time.perf_counter(), []
    only = [c.strip() for c in args.only.split(",") if c.strip()]
    for check in only or CHECKS:
        if DEVICE != "cuda" and check in CUDA_ONLY:
            continue
        if time.perf_counter() - t_start > args.budget_s:
            rows.append(_row(check, "SKIPPED: over --budget-s"))
            print(rows[-1], flush=True)
            continue
        t0 = time.perf_counter()
        try:
            fn = globals()[check]
            got = fn(out) if fn.__code__.co_argcount else fn()
        except Exception as e:  # report, keep the rows above
            got = [_row(check, f"FAILED: {type(e).__name__}: {e}"[:100])]
        got[-1] += f"   [{time.perf_counter() - t0:.0f} s]"
        rows += got
        print("\n".join(got), flush=True)
    (out / "table.txt").write_text("\n".join(rows) + "\n")
    print(f"total {time.perf_counter() - t_start:.0f} s; table in {out / 'table.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
