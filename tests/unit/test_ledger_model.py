"""The ledger's queries on a ledger written by hand, where every number can be checked."""

import json

import pytest

from memledger.errors import LedgerFormatError
from memledger.ledger.model import Ledger
from memledger.ledger.schema import SCHEMA

# A step in miniature (events 0..9), bytes chosen so every sum is unambiguous:
#   sid 0  parameter 1000 B  live from 0 (made in setup)
#   sid 1  input       10 B  made ev 1 (other phase), freed at 9
#   sid 2  activation 200 B  made ev 2 (forward), saved, unpacked ev 6, freed at 7
#   sid 3  temporary   30 B  made ev 3 (forward), freed at 4
#   sid 4  gradient   1000 B made ev 6 (backward), last used ev 8, never freed
#   sid 5  opt state  2000 B made ev 8 (optimizer), never freed
RECORDS = [
    {"k": "header", "schema": SCHEMA},
    {"k": "phase", "ev": 0, "ph": "setup", "step": 1},
    {"k": "alloc", "sid": 0, "ev": 0, "bytes": 1000, "dev": "cpu", "dtype": "float32",
     "shape": [250], "op": "empty.memory_format", "mod": "", "ph": "setup", "step": 1},
    {"k": "role", "sid": 0, "role": "parameter", "name": "fc.weight"},
    {"k": "phase", "ev": 1, "ph": "other", "step": 1},
    {"k": "alloc", "sid": 1, "ev": 1, "bytes": 10, "dev": "cpu", "op": "randn.default",
     "mod": "", "ph": "other", "step": 1},
    {"k": "phase", "ev": 2, "ph": "forward", "step": 1},
    {"k": "role", "sid": 1, "role": "input"},
    {"k": "alloc", "sid": 2, "ev": 2, "bytes": 200, "dev": "cpu", "op": "mm.default",
     "mod": "fc", "ph": "forward", "step": 1},
    {"k": "saved", "sid": 2, "ev": 2, "mod": "act"},
    {"k": "alloc", "sid": 3, "ev": 3, "bytes": 30, "dev": "cpu", "op": "add.Tensor",
     "mod": "fc", "ph": "forward", "step": 1},
    {"k": "free", "sid": 3, "ev": 4, "last": 3},
    {"k": "phase", "ev": 5, "ph": "backward", "step": 1},
    {"k": "unpack", "sid": 2, "ev": 6},
    {"k": "alloc", "sid": 4, "ev": 6, "bytes": 1000, "dev": "cpu", "op": "mm.default",
     "mod": "act", "ph": "backward", "step": 1},
    {"k": "free", "sid": 2, "ev": 7, "last": 6},
    {"k": "phase", "ev": 8, "ph": "optimizer", "step": 1},
    {"k": "role", "sid": 4, "role": "gradient", "name": "fc.weight"},
    {"k": "alloc", "sid": 5, "ev": 8, "bytes": 2000, "dev": "cpu", "op": "zeros_like.default",
     "mod": "optimizer", "ph": "optimizer", "step": 1},
    {"k": "role", "sid": 5, "role": "optimizer_state", "name": "fc.weight.exp_avg"},
    {"k": "step", "step": 1, "ev": 8, "ns": 1000},
    {"k": "free", "sid": 1, "ev": 9, "last": 2},
    {"k": "live", "sid": 0, "last": 8},
    {"k": "live", "sid": 4, "last": 8},
    {"k": "live", "sid": 5, "last": 8},
    {"k": "end", "ev": 10, "status": "ok"},
    {"k": "measured", "source": "cpu-profiler", "device": "cpu", "peak_bytes": 4016},
]


@pytest.fixture
def led():
    return Ledger.from_records(RECORDS)


def test_curve_is_live_bytes_after_each_event(led):
    assert led.n_events == 10
    # ev0 param 1000; ev1 +input 10; ev2 +act 200; ev3 +tmp 30; ev4 tmp freed; ev5 same;
    # ev6 +grad 1000; ev7 act freed; ev8 +state 2000; ev9 input freed
    assert led.curve().tolist() == [1000, 1010, 1210, 1240, 1210, 1210, 2210, 2010, 4010, 4000]


def test_peak_and_where(led):
    pk = led.peak()
    assert (pk.bytes, pk.event, pk.step, pk.phase, pk.op) == (4010, 8, 1, "optimizer",
                                                               "zeros_like.default")


def test_categories_and_breakdown_at_peak(led):
    assert led.storages["category"].tolist() == [
        "parameter", "input", "activation", "temporary", "gradient", "optimizer_state"]
    at = led.at_peak()
    assert at["parameter"] == 1000 and at["gradient"] == 1000 and at["optimizer_state"] == 2000
    assert at["input"] == 10 and at["activation"] == 0
    assert at["workspace"] == 4016 - 4010           # measured − ledger peak
    assert sum(at.values()) == 4016                 # every measured byte in one category


def test_parameter_module_comes_from_its_name(led):
    assert led.storages.loc[0, "module"] == "fc"


def test_peak_by_phase_and_step(led):
    assert led.peak_by("phase") == {"setup": 1000, "forward": 1240, "backward": 2210,
                                    "optimizer": 4010, "other": 1010}
    assert led.peak_by("step") == {1: 4010}


def test_live_at_and_saved_before_backward(led):
    assert led.live_at(3)["sid"].tolist() == [0, 2, 3, 1]   # largest first
    ev, saved = led.saved_before_backward()
    assert ev == 4 and saved["bytes"].sum() == 200 and saved["saved_module"].tolist() == ["act"]


def test_live_by_module_phase_step(led):
    # right after ev 3: param (fc, setup) 1000, act (fc, forward) 200, tmp (fc, forward) 30,
    # input ('', other) 10
    assert led.live_by(3, "module") == {"fc": 1230, "": 10}
    assert led.live_by(3, "phase") == {"setup": 1000, "forward": 230, "other": 10}
    assert led.live_by(3, "step") == {1: 1240}


def test_idle_residency(led):
    idle = led.idle(top=None)
    # input: last used 2, freed 9 → idle events 3..8 = 6 × 10 B; gradient: last 8, live to 10 → 1 × 1000
    rows = {int(r.sid): (int(r.idle_events), int(r.idle_byte_events)) for r in idle.itertuples()}
    assert rows == {1: (6, 60), 4: (1, 1000)}


@pytest.mark.parametrize("op", ["torch.get_rng_state", "get_rng_state", "fork_rng"])
def test_a_generator_state_is_never_reported_idle(op):
    """A generator state made in forward (ev 3) and freed at 9, no use recorded: it was read
    back by `torch.set_rng_state` at some event the trace cannot see (Note [A generator
    state's read is never seen], ledger/model.py); it read 5 idle events × 5,056 B before."""
    state = {"k": "alloc", "sid": 6, "ev": 3, "bytes": 5056, "dev": "cpu", "dtype": "uint8",
             "shape": [5056], "op": op, "mod": "fc", "ph": "forward", "step": 1}
    free = {"k": "free", "sid": 6, "ev": 9, "last": 3}
    recs = RECORDS[:10] + [state] + RECORDS[10:-4] + [free] + RECORDS[-4:]
    led = Ledger.from_records(recs)
    assert led.peak().bytes == 4010 + 5056   # counted in the curve as before
    idle = led.idle(top=None)
    assert 6 not in idle["sid"].tolist() and sorted(idle["sid"].tolist()) == [1, 4]


def test_summary_contract_keys(led):
    d = led.summary().to_json_dict()
    assert d["schema"] == "memledger.summary/1"
    for key in ("device", "steps_traced", "peak", "at_peak", "by_phase_peak", "activations",
                "measured", "resident"):
        assert key in d
    assert d["peak"]["bytes"] == 4010 and d["measured"] == {"peak_bytes": 4016,
                                                            "source": "cpu-profiler"}
    assert d["resident"]["optimizer_state"] == 2000 and d["resident"]["input"] == 0


def _write(path, records, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def test_truncated_last_line_is_kept_partial(tmp_path):
    p = _write(tmp_path / "cut.ledger", RECORDS[:12], tail='{"k": "free", "sid"')
    led = Ledger.load(p)
    assert led.truncated and not led.complete
    assert led.peak().bytes == 1240        # what happened up to the cut is all there


def test_corrupt_middle_line_is_an_error(tmp_path):
    p = tmp_path / "bad.ledger"
    lines = [json.dumps(r) for r in RECORDS]
    lines[5] = "{garbage"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(LedgerFormatError, match="line 6 is not valid JSON"):
        Ledger.load(p)


def test_unknown_schema_and_not_a_ledger(tmp_path):
    p = _write(tmp_path / "v9.ledger", [{"k": "header", "schema": "memledger.ledger/9"}])
    with pytest.raises(LedgerFormatError, match="upgrade memledger"):
        Ledger.load(p)
    q = tmp_path / "x.ledger"
    q.write_bytes(b"\x80\x04\x95 pickle")
    with pytest.raises(LedgerFormatError, match="not a memledger ledger"):
        Ledger.load(q)
    with pytest.raises(LedgerFormatError, match="no ledger at"):
        Ledger.load(tmp_path / "missing.ledger")


def test_ledger_reads_without_torch():
    import subprocess
    import sys
    code = ("import sys; import memledger.ledger, memledger.ledger.summary, memledger.units; "
            "assert 'torch' not in sys.modules, 'ledger imported torch'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_record_lacking_a_field_is_refused(tmp_path):
    broken = [dict(r) for r in RECORDS]
    del broken[2]["bytes"]                 # the parameter's alloc record
    with pytest.raises(LedgerFormatError, match="alloc records lack 'bytes'"):
        Ledger.load(_write(tmp_path / "nobytes.ledger", broken))
    nokind = RECORDS[:3] + [{"sid": 9}] + RECORDS[3:]
    with pytest.raises(LedgerFormatError, match="line 4: not a ledger record"):
        Ledger.load(_write(tmp_path / "nokind.ledger", nokind))


def test_a_ledger_file_is_plain_pandas_json_lines(tmp_path):
    import pandas as pd

    raw = pd.read_json(_write(tmp_path / "raw.ledger", RECORDS), lines=True)
    assert len(raw) == len(RECORDS)
    assert raw.loc[raw["k"] == "alloc", "bytes"].astype(int).tolist() == [1000, 10, 200, 30,
                                                                           1000, 2000]


def test_kernel_scratch_explains_what_no_tensor_does():
    """Note [Kernel scratch]: the allocator pass measured mm's scratch per call (the k-th
    call is the k-th event mm made storages at: events 2 and 6). 1,806 B inside the second
    (backward) brings the curve there to 2,210 + 1,806 = 4,016 B, the allocator's peak, which
    the tensors alone (peak 4,010 B) fall 6 B short of. A record whose call count differs
    from the ledger's (the runs diverged) is left out."""
    from memledger.report.terminal import scratch_clause

    led = Ledger.from_records(RECORDS + [
        {"k": "opscratch", "device": "cpu", "ops": {"mm": [0, 1806]}}])
    ev, b = led.kernel_scratch()
    assert ev.tolist() == [6] and b.tolist() == [1806]
    assert led.peak_with_scratch() == 4016
    m = led.summary().measured
    assert m.ledger_with_scratch_bytes == 4016
    # the tensors' own peak (4,010 B) is at event 8, in the optimizer: the peak with the
    # scratch is elsewhere, and said (Note [The peak with the scratch, elsewhere])
    assert (led.peak().event, led.peak().phase) == (8, "optimizer")
    assert (m.ledger_with_scratch_peak.event, m.ledger_with_scratch_peak.bytes) == (6, 4016)
    assert scratch_clause(m) == ("; with the scratch kernels took inside ops and the Python "
                                 "numbers ops wrapped as tensors (measured op by op), it "
                                 "explains every byte; with it, the peak is at step 1 · "
                                 "backward · mm in act, not at the ledger's own above")
    diverged = Ledger.from_records(RECORDS + [
        {"k": "opscratch", "device": "cpu", "ops": {"mm": [0, 1806, 5]}}])
    assert diverged.kernel_scratch()[0].tolist() == []
    assert diverged.summary().measured.ledger_with_scratch_bytes is None


def test_scratch_of_a_copy_the_ledger_holds_as_its_own_event_is_not_added():
    """Note [Inputs a fallback copies before the op] (trace/allocator.py): the profiler
    listed a 200 B call of `mm` inside `add`'s call (a conjugate fallback's `clone` before
    RotatE's `mul`), freed inside it, 200 B of scratch; the ledger's event just before
    `add`'s (event 2) is that `mm`, its 200 B a storage already, so `add`'s own scratch (0)
    is taken. Where the event before is no such call (other bytes) the kernel made that
    call itself, unseen, and its bytes stay scratch."""
    seen = Ledger.from_records(RECORDS + [
        {"k": "opscratch", "device": "cpu", "ops": {"add": [200]},
         "nested": {"add": [[0, [["mm", 200, 0]]]]}}])
    assert seen.kernel_scratch()[0].tolist() == []
    # the fallback's copy first, then a call of the op's own kernel (no event): the first
    # matches, and the scratch without it is taken
    first = Ledger.from_records(RECORDS + [
        {"k": "opscratch", "device": "cpu", "ops": {"add": [200]},
         "nested": {"add": [[0, [["mm", 200, 0], ["empty", 30, 0]]]]}}])
    assert first.kernel_scratch()[0].tolist() == []
    unseen = Ledger.from_records(RECORDS + [
        {"k": "opscratch", "device": "cpu", "ops": {"add": [200]},
         "nested": {"add": [[0, [["mm", 100, 0]]]]}}])
    ev, b = unseen.kernel_scratch()
    assert ev.tolist() == [3] and b.tolist() == [200]


def test_scratch_matched_past_calls_that_made_nothing():
    """Note [Calls that made nothing] (trace/allocator.py): the allocator pass saw four mm
    calls, two of them `out=` calls that made no storage (`bare`: places 0 and 2), where the
    ledger has two events mm made storages at. Matched past those, the second call's
    1,806 B land at event 6; without `bare` the counts differ and the op is left out."""
    led = Ledger.from_records(RECORDS + [
        {"k": "opscratch", "device": "cpu", "ops": {"mm": [3, 0, 0, 1806]},
         "bare": {"mm": [0, 2]}}])
    ev, b = led.kernel_scratch()
    assert ev.tolist() == [6] and b.tolist() == [1806]
    assert led.peak_with_scratch() == 4016
    old = Ledger.from_records(RECORDS + [
        {"k": "opscratch", "device": "cpu", "ops": {"mm": [3, 0, 0, 1806]}}])
    assert old.kernel_scratch()[0].tolist() == []


def test_scratch_of_a_call_that_made_nothing_goes_to_its_event():
    """Note [Ops that made nothing, placed] (trace/collector.py): `torch.mm(a, b, out=buf)`
    at event 5 made no storage, and its kernel took 2,806 B of scratch (TRL's fused LM
    head: 22,016 B per tile); the `bare` record names the event, so the scratch lands
    there: 1,210 B live + 2,806 = 4,016 B, the allocator's peak. The fourth call, which
    allocated nothing and which the dispatch mode never saw (a checkpoint re-run stopped in
    a pack hook of its inputs, before its kernel), has no event between the same two
    events that made something and is left out; the others still match. Without the
    `bare` record (an older ledger) the out= call's scratch has nowhere to go."""
    ops = {"k": "opscratch", "device": "cpu", "ops": {"mm": [3, 2806, 1806, 0]},
           "bare": {"mm": [1, 3]}}
    led = Ledger.from_records(RECORDS + [ops, {"k": "bare", "op": "mm.out", "ev": [5]}])
    ev, b = led.kernel_scratch()
    assert sorted(zip(ev.tolist(), b.tolist())) == [(2, 3), (5, 2806), (6, 1806)]
    assert led.curve_with_scratch()[5] == 4016 and led.peak_with_scratch() == 4016
    # every call an event, in order, where the counts agree
    whole = Ledger.from_records(RECORDS + [
        {**ops, "ops": {"mm": [3, 2806, 1806]}, "bare": {"mm": [1]}},
        {"k": "bare", "op": "mm.out", "ev": [5]}])
    assert sorted(zip(*(x.tolist() for x in whole.kernel_scratch()))) == [
        (2, 3), (5, 2806), (6, 1806)]
    old = Ledger.from_records(RECORDS + [ops])
    assert sorted(zip(*(x.tolist() for x in old.kernel_scratch()))) == [(2, 3), (6, 1806)]


def test_small_scratch_counts_once_beside_the_wrapped_numbers():
    """Note [Small scratch] (trace/allocator.py): scratch of any size is matched to its op;
    where the op was also handed a Python number (`scalars` records: 8 B wrapped + 4 B
    cast), the allocator measured the cast inside the op as scratch too, so the event's
    numbers come off its scratch: mm's second call, 4 B of scratch that are its number's
    cast, counts 12 B, not 16; its first call, 512 B of its own, counts 512."""
    led = Ledger.from_records(RECORDS + [
        {"k": "opscratch", "device": "cpu", "ops": {"mm": [512, 4]}},
        {"k": "scalars", "device": "cpu", "ev": [6], "bytes": [12]}])
    ev, b = led.kernel_scratch()
    assert sorted(zip(ev.tolist(), b.tolist())) == [(2, 512), (6, 12)]


def test_the_collectives_own_buffers_are_named_in_the_agreement():
    """A rank's allocator peak can hold gloo's own buffers (made on its threads, never an
    op's output): `show` says how much of the gap they are."""
    from memledger.report.terminal import collective_clause

    led = Ledger.from_records(RECORDS[:-1] + [
        {"k": "measured", "source": "cpu-profiler", "device": "cpu", "peak_bytes": 5016,
         "collective_at_peak_bytes": 1000}])
    m = led.summary().measured
    assert collective_clause(m) == ("; 1,000 B of it are the collectives' own buffers, "
                                    "which no ledger sees")
    assert collective_clause(Ledger.from_records(RECORDS).summary().measured) == ""


def test_cublas_workspace_is_named_in_the_agreement():
    """Note [The cuBLAS workspace] (trace/allocator.py): on CUDA the allocator pass measures
    what clearing cuBLAS's workspaces gives back; `show` says that part of the gap is it
    (the H200's 2 x 32 MiB, docs/gpu.md), and `--json` carries it."""
    from memledger.report.terminal import cublas_clause

    led = Ledger.from_records(RECORDS[:-1] + [
        {"k": "measured", "source": "cuda-allocator", "device": "cpu",
         "peak_bytes": 4016 + 67_108_864, "cublas_workspace_bytes": 67_108_864}])
    m = led.summary().measured
    assert m.cublas_workspace_bytes == 67_108_864
    assert led.summary().to_json_dict()["measured"]["cublas_workspace_bytes"] == 67_108_864
    assert cublas_clause(m) == ("; 64.0 MiB of it is cuBLAS's workspace (67,108,864 B, "
                                "measured), which no tensor holds")
    assert cublas_clause(Ledger.from_records(RECORDS).summary().measured) == ""


def test_the_allocators_rounding_is_named_in_the_agreement():
    """Note [Blocks larger than asked] (trace/allocator.py): on CUDA the allocated peak
    minus the requested peak is a floor on the caching allocator's rounding at the peak;
    `show` names it after cuBLAS's workspace (GPT-2 4 x 256 on an H100: 68,157,440 B of
    cuBLAS and 4,195,828 B more, docs/gpu.md), `--json` carries it; older ledgers have none."""
    from memledger.report.terminal import cublas_clause
    from memledger.trace.allocator import cuda_stats_record

    stats = {"allocated_bytes.all.peak": 252_629_504, "requested_bytes.all.peak": 249_100_000}
    rec = cuda_stats_record(stats)
    assert rec["requested_peak_bytes"] == 249_100_000
    assert "requested_peak_bytes" not in cuda_stats_record({"allocated_bytes.all.peak": 1})
    led = Ledger.from_records(RECORDS[:-1] + [
        {"k": "measured", "source": "cuda-allocator", "device": "cpu",
         "peak_bytes": 4016 + 67_108_864 + 1_048_576, "cublas_workspace_bytes": 67_108_864,
         "requested_peak_bytes": 4016 + 67_108_864 + 512}])
    m = led.summary().measured
    assert m.rounding_bytes == 1_048_064
    assert led.summary().to_json_dict()["measured"]["rounding_bytes"] == 1_048_064
    assert cublas_clause(m) == ("; 64.0 MiB of it is cuBLAS's workspace (67,108,864 B, "
                                "measured), which no tensor holds; at least 1023.5 KiB "
                                "(1,048,064 B) is the caching allocator's rounding (blocks "
                                "larger than what was asked)")
    assert Ledger.from_records(RECORDS).summary().measured.rounding_bytes is None


def test_ops_of_the_models_own_forward_are_named_by_its_class():
    """Module path "" is both the script and the model itself (named_modules() names the root
    ""): reports tell them apart by the model's forward scope (ledger/names.py)."""
    recs = [r for r in RECORDS if r["k"] not in ("end", "measured")]
    recs[recs.index(next(r for r in recs if r.get("sid") == 3 and r["k"] == "alloc"))] = {
        **next(r for r in recs if r.get("sid") == 3 and r["k"] == "alloc"), "mod": ""}
    recs += [{"k": "scope", "mod": "", "ev0": 2, "ev1": 5, "ph": "forward", "step": 1,
              "ns": 1, "cls": "TinyNet"},
             {"k": "scope", "mod": "fc", "ev0": 2, "ev1": 3, "ph": "forward", "step": 1,
              "ns": 1, "cls": "Linear"},
             {"k": "end", "ev": 10, "status": "ok"}]
    led = Ledger.from_records(recs)
    # sid 1 (the batch, ev 1) is the script's; sid 3 (ev 3, inside TinyNet's forward) is not
    rows = led.labelled(led.storages.loc[[1, 2, 3]])
    assert rows["module"].tolist() == ["", "fc", "(TinyNet.forward)"]
    assert led.module_labels(["", "", ""], [1, 4, 5]).tolist() == ["", "(TinyNet.forward)", ""]
    # the replay's columns keep the path
    assert led.storages.loc[3, "module"] == ""


def test_backward_of_the_models_own_forward_is_named_by_its_class():
    """A backward op carries the module that saved what its node unpacked: "" both for a
    save in the model's own forward (a transformers model's loss) and for one in the
    script; the save's event tells them apart (ModernBERT's peak read "in the script")."""
    a = {"dev": "cpu", "op": "x.default"}
    recs = [{"k": "header", "schema": SCHEMA},
            {"k": "phase", "ev": 0, "ph": "forward", "step": 1},
            {"k": "alloc", "sid": 1, "ev": 1, "bytes": 8, "mod": "", "ph": "forward",
             "step": 1, **a},
            {"k": "saved", "sid": 1, "ev": 1, "mod": ""},
            {"k": "scope", "mod": "", "ev0": 0, "ev1": 2, "ph": "forward", "step": 1,
             "ns": 1, "cls": "TinyNet"},
            {"k": "alloc", "sid": 2, "ev": 3, "bytes": 8, "mod": "", "ph": "forward",
             "step": 1, **a},
            {"k": "saved", "sid": 2, "ev": 3, "mod": ""},
            {"k": "phase", "ev": 4, "ph": "backward", "step": 1},
            {"k": "unpack", "sid": 2, "ev": 4},
            {"k": "alloc", "sid": 3, "ev": 4, "bytes": 8, "mod": "", "ph": "backward",
             "step": 1, **a},
            {"k": "unpack", "sid": 1, "ev": 6},
            {"k": "alloc", "sid": 4, "ev": 6, "bytes": 8, "mod": "", "ph": "backward",
             "step": 1, **a},
            {"k": "end", "ev": 8, "status": "ok"}]
    led = Ledger.from_records(recs)
    assert led.module_labels([""] * 4, [1, 3, 4, 6]).tolist() == [
        "(TinyNet.forward)", "", "", "(TinyNet.forward)"]
    assert led.labelled(led.storages.loc[[3, 4]])["module"].tolist() == [
        "", "(TinyNet.forward)"]


def test_frees_the_garbage_collector_made():
    """`"gc": 1` on a free (trace/gc_window.py): the input (10 B, last used at 2, freed at 9)
    idle at the peak (event 8), the temporary (30 B, freed at 4) before it."""
    from memledger.ledger.summary import summarize

    recs = [dict(r, gc=1) if r["k"] == "free" and r["sid"] in (1, 3) else r for r in RECORDS]
    led = Ledger.from_records(recs)
    assert led.peak().event == 8
    assert list(led.storages.index[led.storages["gc_freed"]]) == [1, 3]
    g = summarize(led).cycle_garbage
    assert (g.storages, g.bytes, g.at_peak_bytes) == (2, 40, 10)
    assert summarize(Ledger.from_records(RECORDS)).cycle_garbage is None


def test_saves_no_backward_read():
    """A storage saved for backward and freed unread (sid 3, 30 B, freed at 4: before the
    peak at 8) is a part of a graph no backward ran; sid 2, unpacked at 6, is not."""
    from memledger.ledger.summary import summarize

    at = next(i for i, r in enumerate(RECORDS) if r["k"] == "alloc" and r["sid"] == 3) + 1
    recs = [*RECORDS[:at], {"k": "saved", "sid": 3, "ev": 3, "mod": "act"}, *RECORDS[at:]]
    u = summarize(Ledger.from_records(recs)).unread_saves
    assert (u.storages, u.bytes, u.at_peak_bytes) == (1, 30, 0)
    assert summarize(Ledger.from_records(RECORDS)).unread_saves is None
