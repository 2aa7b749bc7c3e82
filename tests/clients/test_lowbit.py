"""Low-bit optimizer state and optimizers compiled whole (tests/clients/train_lowbit.py).

torchao's `AdamW8bit` / `AdamW4bit` / `AdamWFp8` keep their state in traceable wrapper
subclasses and compile their update with `torch.compile(fullgraph=True)`; the script here
does both with code of its own, so the test needs no torchao (docs/accuracy.md, "8-bit
optimizer state", has the torchao runs).
"""

from __future__ import annotations

from tests.clients.harness import run_client


def _live_state(led) -> tuple[int, list[str]]:
    """Bytes and names of the optimizer state live when the traced steps end."""
    st = led.storages
    live = st[(st["category"] == "optimizer_state") & (st["freed"] >= int(st["freed"].max()))]
    return int(live["bytes"].sum()), sorted(map(str, live["name"]))


def test_8bit_state_counts_its_codes_and_scales_and_its_dequantized_temporaries():
    """Note [Wrapper subclasses] (trace/wrapped.py). The momentum of every tensor of n values
    is n int8 codes and n/64 fp32 scales: 17/16 bytes a value. The net has 70,336 values:
    74,732 B of state (before: 281,344 B, the stand-in fp32 storage of each wrapper, and a
    ledger peak of 1,091,064 B against 809,720 B at the allocator). The step's fp32
    temporaries, made by ops inside the subclass's own dispatch, are in the ledger too:
    its peak is the allocator's to the byte, and policies are predicted to the byte."""
    run = run_client("train_lowbit.py", ["--case", "int8"],
                     ["checkpoint:blocks.*", "offload:blocks.*", "selective:blocks.1"])
    values = 2 * (64 * 256 + 256 + 256 * 64 + 64) + 64 * 64 + 64
    assert values == 70_336
    state, names = _live_state(run.ledger)
    assert state == values * 17 // 16 == 74_732
    assert "blocks.0.fc1.weight.momentum.codes" in names
    assert "blocks.0.fc1.weight.momentum.scale" in names
    assert run.ledger_peak == run.allocator_peak == 809_720
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)


def test_an_optimizer_compiled_with_fullgraph_is_traced_as_its_eager_run():
    """Note [Compiled code runs eager under the collector] (trace/compiled.py): Dynamo
    compiles nothing under the collector's dispatch mode, and `fullgraph=True` made that
    an error: "torch.compile with fullgraph=True found no compiled frames", the script's
    exit under `trace` after running fine untraced. Now the ledger pass runs the update
    eagerly and the allocator pass compiled: the function's graphs count as compiles
    (torch 2.13 counts no frame for them), so `show` says which run is which."""
    run = run_client("train_lowbit.py", ["--case", "fullgraph"], [])
    assert run.summary.compiled
    assert sum(r["frames"] for r in run.ledger.extra["compiles"]) > 0
    state, names = _live_state(run.ledger)
    assert state == 70_336 * 4 and len(names) == 10       # fp32 momentum, no step count
    # compare puts the eager prediction beside the compiled measurement: one line says so
    # (torchao's AdamW8bit: 9.2 MiB predicted, 3.6 MiB measured, "+158 %" unexplained)
    from memledger.measure.runner import MeasureResult
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict
    from memledger.verify.compare import fill_performance
    from memledger.verify.verdict import CompareReport, Gates, PolicyComparison

    pol = parse_policy("checkpoint:blocks.*")
    row = PolicyComparison(policy=str(pol), verdict="OK", reason="", failed_gate=None,
                           gates=Gates(inputs=True, gradients=True, update=True))
    rep = CompareReport(script="train_lowbit.py", steps=2, device="cpu", tolerance="bitwise",
                        reproducible=True, noise_floor=0.0, performance=False, policies=[row])
    base = MeasureResult(policy="none", peak_bytes=run.allocator_peak, step_time_s=0.01,
                         source="cpu-profiler", steps=2, step_times_s=[0.01] * 3)
    pred = predict(run.ledger, [pol])
    # the compiled run's larger peak is no workspace of the eager one: not carried to the
    # predictions (it had put the baseline at the compiled run's 1,446,916 B)
    assert pred.baseline_peak_bytes == run.ledger.peak_with_scratch() == run.ledger_peak
    fill_performance(rep, run.ledger, pred, [pol], base, {str(pol): base}, base)
    assert rep.compiled == (
        f"torch.compile: the predicted peaks are the EAGER run's (the baseline "
        f"{run.ledger_peak:,} B), as the trace runs compiled code; the measured peaks are "
        f"the compiled run's (the baseline {run.allocator_peak:,} B)")


def test_qlora_frozen_8bit_weights_saved_for_backward_under_every_policy():
    """QLoRA as torchao's NF4 does it (`--case qlora`): each Linear's base weight a frozen
    Int8State Parameter, saved for backward by a custom autograd function, and a rank-8
    LoRA. The frozen weights are their codes and scales (4 x 16,384 values x 17/16 B),
    the LoRA and the head fp32. Before: the ledger 262,144 B over the allocator (each
    weight at its fp32 stand-in size), predictions 262,144 B over too, and every `measure`
    failed ("Attempted to access the data pointer on an invalid python storage": the
    policy's set of parameter storages read the wrapper's own storage)."""
    run = run_client("train_lowbit.py", ["--case", "qlora", "--batch", "256"],
                     ["checkpoint:blocks.*", "offload:blocks.*", "selective:blocks.*",
                      "checkpoint:blocks.0+offload:blocks.1"])
    st = run.ledger.storages
    params = st[(st["category"] == "parameter") & (st["freed"] >= int(st["freed"].max()))]
    frozen, lora, head = 4 * 16_384 * 17 // 16, 2 * 5_120 * 4, 4_160 * 4
    assert int(params["bytes"].sum()) == frozen + lora + head == 127_232
    assert run.ledger_peak == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)


def test_the_gates_compare_frozen_8bit_weights_by_the_bytes_they_hold():
    """compare's capture copied each parameter with `.to("cpu", copy=True)`: torchao's NF4
    weight takes no `copy` there and the baseline failed ("the baseline run failed ...
    .to() does not accept copy argument"). A wrapper is captured as the bytes of its inner
    tensors (Note [Wrapper subclasses]): checkpoint passes bitwise, and a perturbed saved
    tensor is still caught. `Int8State` raises on ops it does not implement, `.to` among
    them, as NF4 does."""
    from pathlib import Path

    from memledger.verify.gates import run_gates
    from memledger.verify.runs import Variant, capture_in_process

    def in_process(script, argv, variant, steps, out):
        return capture_in_process(script, argv, variant, steps)

    script = Path(__file__).parent / "train_lowbit.py"
    report = run_gates(script, ["--case", "qlora"], [
        Variant("checkpoint:blocks.*", "checkpoint:blocks.*"),
        Variant("perturb", broken="perturb_saved", selector="blocks.1")],
        steps=2, runner=in_process)
    ok, bad = report.outcomes
    assert ok.passed, ok.reason
    assert not bad.passed and not bad.gates["gradients"]


def test_the_doctor_watches_an_optimizer_compiled_with_fullgraph_and_8bit_state():
    """The doctor's probe is a TorchFunctionMode, which Dynamo traces into: its frame
    reads made the fullgraph update fail ("the doctor could not watch the script: script
    raised Unsupported"), as torchao's AdamW8bit did. It runs under the same eager stance
    (Note [Compiled code runs eager under the collector]); neither loop has a finding."""
    from pathlib import Path

    from memledger.doctor.run import diagnose_in_process

    script = Path(__file__).parent / "train_lowbit.py"
    for case in ("fullgraph", "int8", "qlora"):
        report, outcome = diagnose_in_process(script, ["--case", case], 3)
        assert outcome.code == 0, (case, outcome.reason)
        assert [f.line() for f in report.findings] == [], case


def test_timed_steps_of_a_fullgraph_optimizer_and_8bit_state():
    """The allocator pass's op-timed step runs under a dispatch mode of its own (OpTimer):
    a fullgraph update failed there ("the ledger has no measured peak"), and a wrapper's
    own ops were not timed, which put the k-th timed op against another event. Both run as
    under the collector now; the timing record has an op time per event of a step."""
    for case in ("fullgraph", "int8"):
        run = run_client("train_lowbit.py", ["--case", case, "--steps", "30"], [],
                         timing_steps=3)
        assert run.allocator_peak > 0, case
        timing = run.ledger.extra["timing"][-1]
        assert timing["ops"] and timing["modules"], case


def test_fake_runs_of_wrapper_subclasses_equal_the_real_ones(tmp_path):
    """Under `--fake` (FakeTensorMode, Note [Wrapper subclasses]) the 8-bit momentum, the
    frozen 8-bit QLoRA weights and the fullgraph update give the real runs' peaks to the
    byte (`memledger trace`: 809,720 B, 582,956 B and 1,016,332 B, fake and real)."""
    import sys
    from pathlib import Path

    import memledger
    from memledger.trace.script import run_script

    script = Path(__file__).parent / "train_lowbit.py"
    for case in ("int8", "qlora", "fullgraph"):
        peaks = []
        for fake in (False, True):
            argv, path = list(sys.argv), list(sys.path)
            try:
                with memledger.trace(tmp_path / f"{case}-{fake}.ledger", fake=fake) as led:
                    run_script(script, ["--case", case, "--steps", "2"])
            finally:
                sys.argv[:], sys.path[:] = argv, path
            peaks.append(led.peak().bytes)
        assert peaks[0] == peaks[1], (case, peaks)
