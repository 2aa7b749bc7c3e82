"""The time side of replay: untraced timings matched to the ledger, the calibration cache,
and the cost formula's arithmetic (memledger/replay/costs.py, Note [Added time])."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from memledger.replay.calib_cache import machine_key, read_cached, write_cached
from memledger.replay.engine import replay
from memledger.replay.policies import parse_policy
from memledger.replay.predict import cost_model, predict
from memledger.replay.prepared import Prepared
from memledger.replay.timings import match_timings

from plan_ledgers import CALIBRATION, blocks_ledger


def test_module_calls_match_by_path_and_occurrence():
    scopes = pd.DataFrame({"mod": ["a", "a", "b", "a", "a", "b"],
                           "ev0": [0, 5, 10, 20, 25, 30], "ev1": [5, 10, 15, 25, 30, 35],
                           "step": [1, 1, 1, 2, 2, 2]})
    rec = {"modules": [[["a", 100], ["a", 300], ["b", 50]],
                       [["a", 200], ["a", 500], ["b", 70]],
                       [["a", 150], ["a", 400], ["b", 60]]]}
    t = match_timings(rec, scopes, pd.DataFrame({"ev": [15, 35]}), 36)
    # the first call of `a` in every step: median(100, 200, 150) = 150; the second: 400
    assert t.call_ns.tolist() == [150, 400, 60, 150, 400, 60]
    # p10 of (100, 150, 200) = 100 + 0.2 x 50 = 110
    assert t.call_lo[0] == pytest.approx(110)


def test_ops_walk_skips_events_the_plain_run_has_not():
    # traced step: events 0..5; mm at 1 and add at 4 made storages; events 2, 3 are a
    # view and a detach the untraced run does not have (detach only exists under hooks)
    rec = {"modules": [[["m", 1]]], "ops": [["randint", 10], ["mm", 500], ["view", 3],
                                            ["add", 40], ["sum", 7]]}
    t = match_timings(rec, pd.DataFrame({"mod": [], "ev0": [], "ev1": [], "step": []}),
                      pd.DataFrame({"ev": [5]}), 6, made_ev=np.array([1, 4]),
                      made_op=np.array(["mm", "add"], dtype=object))
    # randint -> 0; mm -> 1; view -> 2, the extra event 3 gets 0 ns; add -> 4; sum -> 5
    assert t.op_ns.tolist() == [10, 500, 3, 0, 40, 7]
    assert t.op_kind[1] == "mm" and t.op_kind[4] == "add"


def test_checkpoint_cost_is_the_formula():
    # one block: T = 150,000 ns untraced forward; early stop re-runs 3 of its 10 events
    # (up to its last save record: engine.py Rule 3; no op times: share by events = 0.3);
    # 1 save of its own (h), calibration call 500 ns, save 0 ns: 150,000 x 0.3 + 500 = 45,500 ns
    led = blocks_ledger([100_000], [150_000])
    rep = predict(led, [parse_policy("checkpoint:blocks.0")])
    assert rep.policies[0].added_time_s == pytest.approx(45_500e-9, rel=1e-12)
    assert rep.cost_source == "untraced" and rep.calibration == "ledger"
    # the band: lo/hi constants (call 400/600) with the one timed step as its own band
    assert rep.policies[0].added_time_lo_s == pytest.approx(45_400e-9, rel=1e-12)
    assert rep.policies[0].added_time_hi_s == pytest.approx(45_600e-9, rel=1e-12)


def test_checkpoint_call_cost_comes_from_the_models_own_probe():
    # the trace's recompute probe measured 3,000, 2,000 and 4,000 ns per region besides the
    # re-run (median 3,000; 10th percentile 2,000 + 0.2 x 1,000 = 2,200, 90th 3,800) with
    # 2 saves per region; the calibration's per-save cost is 0 here, so call = 3,000 - 2 x 0
    # = 3,000 ns instead of the calibration's 500: 150,000 x 0.3 + 3,000 = 48,000 ns
    # (lo: 45,000 + 2,200; hi: 45,000 + 3,800)
    led = blocks_ledger([100_000], [150_000], timing={
        "ckpt_region_ns": [3_000, 2_000, 4_000], "ckpt_probe_saves": 2.0,
        "ckpt_probe_regions": 4})
    p = predict(led, [parse_policy("checkpoint:blocks.0")]).policies[0]
    assert p.added_time_s == pytest.approx(48_000e-9, rel=1e-12)
    assert p.added_time_lo_s == pytest.approx(47_200e-9, rel=1e-12)
    assert p.added_time_hi_s == pytest.approx(48_800e-9, rel=1e-12)
    assert p.machinery_s == pytest.approx(3_000e-9, rel=1e-12)


def test_offload_cost_is_per_storage_and_per_byte():
    # block 1 offloads h_1 (300,000 B) and y_0 (10,000 B, saved by block 1's first op):
    # 2 x 2,000 ns + 310,000 B x 0.2 ns/B = 66,000 ns
    led = blocks_ledger([100_000, 300_000], [150_000, 20_000])
    rep = predict(led, [parse_policy("offload:blocks.1")])
    assert rep.policies[0].transfer_s == pytest.approx(66_000e-9, rel=1e-12)


def test_offload_cost_is_scaled_to_the_models_own_probe():
    # Note [Offload probe in context]: the trace offloaded the probe regions and measured
    # 150,000, 120,000 and 200,000 ns added per step while writing 2 storages of 310,000 B
    # in all (2 saves; pack 0 here). The calibration prices that stream at 2 x 2,000 +
    # 310,000 x 0.2 = 66,000 ns, so each storage costs 150,000 / 66,000 of its price:
    # block 1's offload (the same 2 storages, 310,000 B) = 150,000 ns; the band follows the
    # probe's 10th and 90th percentiles (126,000 and 190,000) over the band's constants
    probe = {"added_ns": [150_000, 120_000, 200_000], "storages": 2, "bytes": 310_000,
             "saves": 2, "where": "files in /tmp (ext4)"}
    led = blocks_ledger([100_000, 300_000], [150_000, 20_000],
                        timing={"offload_probe": probe})
    rep = predict(led, [parse_policy("offload:blocks.1")])
    p = rep.policies[0]
    assert p.transfer_s == pytest.approx(150_000e-9, rel=1e-12)
    assert (p.added_time_lo_s, p.added_time_hi_s) == (pytest.approx(126_000e-9, rel=1e-12),
                                                      pytest.approx(190_000e-9, rel=1e-12))
    assert rep.offload_to == "files in /tmp (ext4), priced by this model's own offloaded steps"
    # a bandwidth the user gives wins over the probe: 310,000 B x 2 / 1e9 B/s = 620,000 ns
    # (the calibration's 2 x 2,000 ns per storage stays)
    rep = predict(led, [parse_policy("offload:blocks.1")], bandwidth=1e9)
    assert rep.policies[0].transfer_s == pytest.approx(624_000e-9, rel=1e-12)
    assert rep.offload_to == "files in /tmp (ext4), priced by --bandwidth"
    # without a probe: the calibration's price, and no folder to name
    rep = predict(blocks_ledger([100_000, 300_000], [150_000, 20_000]),
                  [parse_policy("offload:blocks.1")])
    assert rep.offload_to == "files, priced by the calibration"


def test_an_offload_probe_that_saw_no_cost_leaves_the_price_to_the_calibration():
    # a trace on a busy machine: the offloaded probe steps ran faster than the plain ones
    # (-859 ms on a 1.2 s step). Scaling by it priced every byte at 0 and `predict` divided
    # by that price (ZeroDivisionError, exit 70); now the calibration prices it: 66,000 ns
    probe = {"added_ns": [-859_000, -900_000, 10_000], "storages": 2, "bytes": 310_000,
             "saves": 2, "where": "files in /tmp (ext4)"}
    led = blocks_ledger([100_000, 300_000], [150_000, 20_000],
                        timing={"offload_probe": probe})
    rep = predict(led, [parse_policy("offload:blocks.1")])
    assert rep.policies[0].transfer_s == pytest.approx(66_000e-9, rel=1e-12)
    assert rep.copy_bytes_per_s == pytest.approx(2e9 / 0.2)
    assert "priced by the calibration (this model's offload probe saw no cost" in rep.offload_to


def test_same_ledger_same_prediction():
    led = blocks_ledger([100_000, 300_000], [150_000, 20_000])
    pols = [parse_policy("checkpoint:blocks.*"), parse_policy("offload:blocks.0")]
    a = predict(led, pols).to_json_dict()
    b = predict(led, pols).to_json_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_calibration_cache_is_keyed(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLEDGER_CACHE_DIR", str(tmp_path))
    assert read_cached("cpu") == {}
    write_cached({"key": machine_key("cpu"), "device": "cpu", "params": CALIBRATION}, "cpu")
    assert read_cached("cpu")["params"] == CALIBRATION
    monkeypatch.setenv("OMP_NUM_THREADS", "7")        # another thread setting: another key
    assert read_cached("cpu") == {}


def test_cost_model_prices_a_replay_without_the_ledger_calibration(tmp_path, monkeypatch):
    """A ledger without its own calibration uses this machine's cached one."""
    monkeypatch.setenv("MEMLEDGER_CACHE_DIR", str(tmp_path))
    led = blocks_ledger([100_000], [150_000])
    led.extra.pop("calibration")
    prep = Prepared.from_ledger(led)
    model, where = cost_model(led, prep)
    assert where == "none"
    r = replay(prep, parse_policy("checkpoint:blocks.0"))
    assert model.price(r).seconds == pytest.approx(45_000e-9, rel=1e-12)   # no call cost
    write_cached({"key": machine_key("cpu"), "device": "cpu", "params": CALIBRATION}, "cpu")
    model, where = cost_model(led, prep)
    assert where == "cache" and model.price(r).seconds == pytest.approx(45_500e-9)


def test_replay_plan_and_the_time_model_never_import_torch():
    from tests.unit.test_imports import loaded_after

    heavy = loaded_after("import memledger.replay.plan, memledger.replay.costs, "
                         "memledger.replay.solve, memledger.replay.calib_cache, "
                         "memledger.replay.timings, memledger.replay.block_options")
    assert "torch" not in heavy


def test_selective_cost_per_kept_op_comes_from_the_models_own_probe():
    """Note [Selective probe in context]. Two blocks of 10 events; every event has an op
    time: 100 ns, but the two `addmm` of each block (events e0+4, e0+6) 30,000 ns each.
    The trace's selective probe measured selective steps 10,000 ns per region over
    checkpointed ones, with sac_op 1,000 ns. The op-time model says, per region (early
    stop off: forward and re-run both the whole 10 events): 2 x 10 x 1,000 - 60,000 kept
    = -40,000; so the 2 x 2 kept ops cost (2 x 10,000 + 2 x 40,000) / 4 = 25,000 ns each."""
    ops = [["view", 100]] * 43                    # events 0..42 of the one step
    for i in range(2):
        e0 = 1 + 10 * i
        ops[e0 + 1], ops[e0 + 9] = ["mul", 100], ["add", 100]   # the storages' own ops
        ops[e0 + 4] = ops[e0 + 6] = ["addmm", 30_000]
    probe = {"region_ns": [10_000], "paths": ["blocks.0", "blocks.1"], "save_ops": ["addmm"]}
    led = blocks_ledger([100_000, 300_000], [150_000, 20_000],
                        timing={"ops": ops, "sac_op_ns": [1_000], "selective_probe": probe})
    prep = Prepared.from_ledger(led)
    model, _ = cost_model(led, prep)
    assert model.consts["median"].sac_keep == 25_000
    # block 0 under selective, beside checkpoint: early stop re-runs its first 3 events,
    # before either addmm (nothing kept to subtract); selective adds sac_op x (10 forward +
    # 3 re-run events) + 2 kept ops x 25,000 = 63,000 ns
    ckpt, sel = (model.price(replay(prep, parse_policy(p)))
                 for p in ("checkpoint:blocks.0", "selective:blocks.0:save=addmm"))
    assert (sel.seconds - ckpt.seconds) == pytest.approx(63_000e-9, rel=1e-9)
    # without the probe a kept op costs nothing beyond its caching mode's sac_op
    plain = blocks_ledger([100_000, 300_000], [150_000, 20_000],
                          timing={"ops": ops, "sac_op_ns": [1_000]})
    assert cost_model(plain, Prepared.from_ledger(plain))[0].consts["median"].sac_keep == 0


def test_predict_says_whether_the_models_own_costs_were_probed():
    """A script that ends after its timed steps leaves a timing record without the probes:
    the calibration prices checkpoint, selective and offload, and predict says so."""
    bare = blocks_ledger([100_000], [150_000])
    assert predict(bare, [parse_policy("checkpoint:blocks.0")]).costs_probed is False
    probed = blocks_ledger([100_000], [150_000], timing={
        "ckpt_region_ns": [3_000], "ckpt_probe_saves": 2.0, "ckpt_probe_regions": 4})
    assert predict(probed, [parse_policy("checkpoint:blocks.0")]).costs_probed is True


def test_compare_says_what_priced_its_predicted_times():
    """compare printed predicted +ms beside measured with no word that the machine's
    calibration priced them (a Mamba whose script ended before trace's probes: +367 ms
    predicted, +192 measured); its report now carries predict's caveats and prints them."""
    from io import StringIO

    from rich.console import Console

    from memledger.measure.runner import MeasureResult
    from memledger.replay.predict import UNPROBED_LINE, time_caveats
    from memledger.report.compare_table import reasons
    from memledger.verify.compare import fill_performance
    from memledger.verify.verdict import CompareReport, Gates, PolicyComparison

    pol = parse_policy("checkpoint:blocks.0")
    bare = blocks_ledger([100_000], [150_000])
    pred = predict(bare, [pol])
    assert pred.cost_source == "untraced" and time_caveats(pred) == [UNPROBED_LINE]
    probed = blocks_ledger([100_000], [150_000], timing={
        "ckpt_region_ns": [3_000], "ckpt_probe_saves": 2.0, "ckpt_probe_regions": 4})
    assert time_caveats(predict(probed, [pol])) == []
    # the trace's own load mark: predict says it; compare, whose own earlier runs make the
    # load it reads, leaves it out (a busy calibration it keeps)
    busy = blocks_ledger([100_000], [150_000], timing={
        "busy": "load average 2.1 on 2 cores", "ckpt_region_ns": [3_000],
        "ckpt_probe_saves": 2.0, "ckpt_probe_regions": 4})
    assert len(time_caveats(predict(busy, [pol]))) == 1
    assert time_caveats(predict(busy, [pol]), own_load=False) == []

    def run(policy: str, peak: int, step: float) -> MeasureResult:
        return MeasureResult(policy=policy, peak_bytes=peak, step_time_s=step,
                             source="cpu-profiler", steps=1, step_times_s=[step] * 3)

    row = PolicyComparison(policy=str(pol), verdict="OK", reason="", failed_gate=None,
                           gates=Gates(inputs=True, gradients=True, update=True))
    rep = CompareReport(script="train.py", steps=1, device="cpu", tolerance="bitwise",
                        reproducible=True, noise_floor=0.0, performance=False, policies=[row])
    base = run("none", 1000, 0.010)
    fill_performance(rep, bare, pred, [pol], base, {str(pol): run(str(pol), 900, 0.012)},
                     base)
    assert rep.to_json_dict()["time_caveats"] == [UNPROBED_LINE]
    con = Console(file=StringIO(), width=300, color_system=None)
    for line in reasons(rep):
        con.print(line)
    assert UNPROBED_LINE in con.file.getvalue()


def test_offload_prices_every_storage_the_offloader_writes(traced_examples):
    """The offloader writes what a region packs, parameters and buffers aside: on
    train_mlp.py `offload:**` that is the batch fc1 saves (64 x 256 fp32 = 65,536 B) and
    the two ReLU outputs (64 x 512 fp32 = 131,072 B each), every step. The time model
    priced the activations alone: 2 storages a step, not 3."""
    from memledger.ledger.model import Ledger

    led = Ledger.load(traced_examples["mlp"])
    w = replay(Prepared.from_ledger(led), parse_policy("offload:**")).work
    steps = led.summary().steps_traced
    assert sorted(w.off_bytes.tolist()) == sorted([65_536, 131_072, 131_072] * steps)


def test_where_copies_go_is_said_when_the_copies_free_nothing(traced_examples):
    """train_mlp.py's `offload:fc2`: fc2 packs the ReLU output the ReLU keeps, so the offload
    frees 0 B but still writes and reads back 131,072 B a step. The table's last line read
    "includes offload copies to  (0 MiB/s": where and at what rate came from freed bytes."""
    from memledger.ledger.model import Ledger

    rep = predict(Ledger.load(traced_examples["mlp"]), [parse_policy("offload:fc2")])
    p = rep.policies[0]
    assert p.saving_bytes == 0 and p.transfer_s > 0
    assert rep.offload_to.startswith("files") and rep.copy_bytes_per_s > 0


def test_a_checkpointed_step_pays_its_own_cost_once():
    # Note [A checkpointed step's own cost]: the probe read 10,000, 8,000 and 12,000 ns that
    # a step with anything checkpointed pays once. Block 0 checkpointed alone adds it once
    # on top of what it added before; blocks 0 and 1 together add it once, not twice
    plain = {"ckpt_region_ns": [3_000, 2_000, 4_000], "ckpt_probe_saves": 2.0,
             "ckpt_probe_regions": 2}
    H, T = [100_000, 300_000], [150_000, 20_000]
    before = blocks_ledger(H, T, timing=plain)
    after = blocks_ledger(H, T, timing={**plain, "ckpt_step_ns": [10_000, 8_000, 12_000]})
    pols = [parse_policy("checkpoint:blocks.0"), parse_policy("checkpoint:blocks.[0-1]"),
            parse_policy("offload:blocks.0")]
    b, a = predict(before, pols).policies, predict(after, pols).policies
    assert a[0].added_time_s - b[0].added_time_s == pytest.approx(10_000e-9, rel=1e-9)
    assert a[1].added_time_s - b[1].added_time_s == pytest.approx(10_000e-9, rel=1e-9)
    assert a[0].added_time_lo_s - b[0].added_time_lo_s == pytest.approx(8_400e-9, rel=1e-9)
    assert a[2].added_time_s == b[2].added_time_s      # offload re-runs nothing


def test_a_probe_run_with_early_stop_has_its_factor_over_the_re_run_share():
    # Note [A checkpointed step's own cost]: with early stop the probe times only the part
    # of each re-run early stop makes: block 0 re-runs 0.3 of its forward (by op time), so
    # a factor read as 0.33 is a whole re-run's 1.1: 1.1 x 150,000 x 0.3 = 49,500 ns. A
    # ledger whose probe ran early stop off (no flag) keeps its factor as read
    probe = {"recompute_factor": [0.33], "ckpt_region_ns": [0.0], "ckpt_probe_regions": 1}
    H, T = [100_000], [150_000]
    es = blocks_ledger(H, T, timing={**probe, "ckpt_early_stop": True,
                                     "ckpt_probe_paths": ["blocks.0"]})
    old = blocks_ledger(H, T, timing=probe)
    pol = [parse_policy("checkpoint:blocks.0")]
    assert predict(es, pol).policies[0].recompute_s == pytest.approx(49_500e-9, rel=1e-9)
    assert predict(old, pol).policies[0].recompute_s == pytest.approx(14_850e-9, rel=1e-9)


def test_plan_says_what_priced_its_times_as_predict_and_compare_do(tmp_path, capsys):
    """plan decided its caveats from the ledger and printed them only on the terminal; its
    report now carries predict's (`time_caveats`, in --json too), as compare's does."""
    import json

    from memledger.cli import main
    from memledger.replay.plan import plan
    from memledger.replay.predict import UNPROBED_LINE
    from plan_ledgers import blocks_records

    H, T = [100_000, 100_000], [150_000, 150_000]
    assert plan(blocks_ledger(H, T), budget_bytes=10**9).time_caveats == [UNPROBED_LINE]
    probed = {"ckpt_region_ns": [3_000], "ckpt_probe_saves": 2.0, "ckpt_probe_regions": 4}
    assert plan(blocks_ledger(H, T, timing=probed), budget_bytes=10**9).time_caveats == []
    path = tmp_path / "bare.ledger"
    path.write_text("".join(json.dumps(r) + "\n" for r in blocks_records(H, T)))
    assert main(["plan", str(path), "--budget", "1GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_caveats"] == [UNPROBED_LINE]
    assert main(["plan", str(path), "--budget", "1GB"]) == 0
    assert UNPROBED_LINE in " ".join(capsys.readouterr().out.split())


def test_bands_of_many_groups_equal_each_groups_band():
    """`bands` (one numpy call per group length, for the 634 module calls of a 48-block
    GPT's step) gives each group exactly its `band`: median, 10th and 90th percentile."""
    from memledger.replay.timings import band, bands

    rng = np.random.default_rng(0)
    groups = {i: [int(x) for x in rng.integers(1, 10**7, size=rng.choice([1, 2, 3, 8]))]
              for i in range(300)}
    got = bands(groups)
    assert got.keys() == groups.keys()
    assert all(got[k] == band(v) for k, v in groups.items())
