"""Modelled time for fake ledgers (memledger/replay/fake_time.py, Note [Modelled time]):
FLOPs / --flops, read from the ledger alone, without torch."""

from __future__ import annotations

import json

import pytest

from memledger.ledger.model import Ledger
from memledger.ledger.schema import SCHEMA
from memledger.replay.fake_time import DEVICE_RATES, flops_by_event, rates_for


def _step(s: int, b: int, sid: int) -> list[dict]:
    """Step `s` on events b..b+9: a block's forward (events 2-3, 4 GFLOP) saves one
    activation; backward (event 6, 8 GFLOP) reads it."""
    dev = "cuda:0"
    return [
        {"k": "phase", "ev": b + 2, "ph": "forward", "step": s},
        {"k": "alloc", "sid": sid, "ev": b + 2, "bytes": 4096, "dev": dev, "op": "mm.default",
         "mod": "block", "ph": "forward", "step": s},
        {"k": "flops", "ev": b + 2, "n": 4_000_000_000},
        {"k": "saved", "sid": sid, "ev": b + 2, "mod": "block"},
        {"k": "scope", "mod": "block", "ev0": b + 2, "ev1": b + 4, "ph": "forward", "step": s,
         "ns": 50, "cls": "Linear"},
        {"k": "phase", "ev": b + 5, "ph": "backward", "step": s},
        {"k": "unpack", "sid": sid, "ev": b + 6},
        {"k": "flops", "ev": b + 6, "n": 8_000_000_000},
        {"k": "free", "sid": sid, "ev": b + 7, "last": b + 6},
        {"k": "phase", "ev": b + 8, "ph": "optimizer", "step": s},
        {"k": "step", "step": s, "ev": b + 9, "ns": 1000},
    ]


RECORDS = [
    {"k": "header", "schema": SCHEMA, "fake": True, "target_device": "cuda:0",
     "fake_kernels": "cpu", "rounding_bytes": 512},
    {"k": "alloc", "sid": 0, "ev": 0, "bytes": 1024, "dev": "cuda:0", "op": "empty",
     "mod": "", "ph": "setup", "step": 1},
    {"k": "role", "sid": 0, "role": "parameter", "name": "block.weight"},
    *_step(1, 0, 1), *_step(2, 10, 2),
    {"k": "live", "sid": 0, "last": 19},
    {"k": "end", "ev": 20, "status": "ok"},
]


@pytest.fixture
def led() -> Ledger:
    return Ledger.from_records([dict(r) for r in RECORDS])


def test_flops_by_event(led):
    per_ev = flops_by_event(led)
    assert len(per_ev) == 20 and per_ev.sum() == 24e9
    assert (per_ev[2], per_ev[6], per_ev[12], per_ev[16]) == (4e9, 8e9, 4e9, 8e9)


def test_rates_default_per_device_and_overridden():
    assert rates_for("cuda:0") == DEVICE_RATES["cuda"]
    assert rates_for("cpu", flops=5e11).flops == 5e11
    assert rates_for("xla:0") == DEVICE_RATES["cpu"]


def test_predict_prices_a_fake_ledger_by_its_flops(led):
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    rep = predict(led, [parse_policy("checkpoint:block")], flops=1e12, bandwidth=1e10)
    # a step is 4 + 8 GFLOP = 12e9 / 1e12 = 12 ms; the block's forward 4e9 / 1e12 = 4 ms,
    # re-run whole (its only op with FLOPs made the saved activation)
    assert rep.untraced_step_time_s == pytest.approx(0.012)
    assert rep.policies[0].recompute_s == pytest.approx(0.004)
    assert rep.time_model == ("modelled: FLOPs at 1 TFLOP/s, copies at 10 GB/s "
                              "(fake ledger, no measured time)")
    assert rep.cost_source == "modelled"
    assert json.loads(json.dumps(rep.to_json_dict()))["time_model"].startswith("modelled")


def test_predict_on_a_fake_ledger_needs_no_torch(tmp_path):
    from tests.unit.test_imports import loaded_after

    path = tmp_path / "fake.ledger"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    setup = (f"from memledger.cli import main\n"
             f"assert main(['predict', {str(path)!r}, '-p', 'checkpoint:block']) == 0")
    assert "torch" not in loaded_after(setup)


def test_a_modelled_ledgers_added_time_is_its_own_flops_not_the_calibrations(led):
    """Note [A modelled ledger's added time] (memledger/replay/costs.py): the calibration's
    per-call, per-save, per-op and per-file constants and its recompute factor are of
    another time scale; a checkpoint adds exactly the FLOPs it re-runs / F, an offload its
    bytes x 2 / B. Before: +12.1 ms on a fake Coconut step of 1.85 us."""
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    calib = {k: {"median": v, "lo": v, "hi": v} for k, v in {
        "recompute_factor": 1.5, "ckpt_call_ns": 12.1e6, "ckpt_save_ns": 1e4,
        "sac_op_ns": 1e4, "sac_call_ns": 1e5, "pack_ns": 1e4, "offload_file_ns": 2e6,
        "offload_ns_per_byte": 0.5}.items()}
    recs = [dict(r) for r in RECORDS]
    recs.insert(-1, {"k": "calibration", "device": "cuda", "params": calib})
    fake = Ledger.from_records(recs)
    F, B = 1e12, 1e10
    rep = predict(fake, [parse_policy("checkpoint:block"), parse_policy("offload:block")],
                  flops=F, bandwidth=B)
    # the block's forward: its one op with FLOPs (event 2, 4 GFLOP) made the saved
    # activation, so the re-run is that op, once per warm step
    rerun_s = 4_000_000_000 / F
    ckpt, off = rep.policies
    assert (ckpt.added_time_s, ckpt.added_time_lo_s, ckpt.added_time_hi_s) == (rerun_s,) * 3
    assert (ckpt.recompute_s, ckpt.machinery_s, ckpt.transfer_s) == (rerun_s, 0.0, 0.0)
    # offload: the one saved storage (4,096 B) written and read back at B each way
    assert off.added_time_s == off.transfer_s == 2 * 4096 / B
    assert off.machinery_s == 0.0
    assert rep.calibration == "none"


def test_a_modelled_selective_keeps_its_save_lists_flops(led):
    """Note [A modelled ledger's added time]: selective re-runs the block less its kept ops;
    the block's one op with FLOPs is an `mm` (the default save list keeps it), so nothing
    with FLOPs is re-run: 0 s. Before: priced as the whole checkpoint (4 ms, no event had
    an op kind) plus the calibration's selective constants."""
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    rep = predict(led, [parse_policy("selective:block"),
                        parse_policy("selective:block:save=addmm")], flops=1e12, bandwidth=1e10)
    kept, rerun = rep.policies
    assert (kept.added_time_s, kept.recompute_s, kept.machinery_s) == (0.0, 0.0, 0.0)
    # a save list without `mm` re-runs it: its 4 GFLOP / F, as checkpoint
    assert (rerun.added_time_s, rerun.recompute_s, rerun.machinery_s) == (0.004, 0.004, 0.0)
