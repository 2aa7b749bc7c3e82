"""Note [A calibration taken on a busy machine] (memledger/replay/calib_cache.py): such a
calibration is used, marked `unsettled` with its reason, said beside every predicted time,
and measured again by the next trace on a quiet machine."""

from __future__ import annotations

import pytest

from memledger.measure import calibrate
from memledger.replay import calib_cache
from memledger.replay.calib_cache import read_cached
from memledger.replay.policies import parse_policy
from memledger.replay.predict import predict, time_caveats, unsettled_line

from plan_ledgers import blocks_ledger

QUIET = {k: {"median": 1.0, "lo": 0.9, "hi": 1.1} for k in calib_cache.COSTS}
# the constants measured on the dev box at load average 9.3 (2 cores), two of them
NOISY = {**QUIET, "recompute_factor": {"median": 0.31, "lo": -5.963, "hi": 2.147},
         "sac_op_ns": {"median": 37104.3, "lo": -613387.5, "hi": 1318648.1}}


def test_busy_reason_is_the_load_beyond_the_cores():
    assert calib_cache.busy_reason(9.3, 2) == "load average 9.3 on 2 cores"
    assert calib_cache.busy_reason(2.0, 2) == ""       # every core busy, none oversubscribed


def test_a_band_below_zero_names_the_constants():
    assert calib_cache.negative_band(QUIET) == ""
    assert calib_cache.negative_band(NOISY) == ("band below zero: recompute_factor -5.96, "
                                              "sac_op_ns -6.13e+05")


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """An empty calibration cache, a load average we set, and constants we hand out."""
    monkeypatch.setenv("MEMLEDGER_CACHE_DIR", str(tmp_path))
    state = {"load": 0.5, "params": QUIET, "measured": 0}

    def measure():
        state["measured"] += 1
        return state["params"]

    monkeypatch.setattr(calibrate, "load_average", lambda: state["load"])
    monkeypatch.setattr(calib_cache, "load_average", lambda: state["load"])
    monkeypatch.setattr(calib_cache, "cores", lambda: 2)
    monkeypatch.setattr(calibrate, "measure_constants", measure)
    return state


def test_busy_calibration_is_kept_until_a_quiet_machine_measures_again(machine):
    machine.update(load=9.3, params=NOISY)
    first = calibrate.calibration("cpu")
    assert first["unsettled"] == "load average 9.3 on 2 cores"
    assert read_cached("cpu")["unsettled"] == first["unsettled"]
    calibrate.calibration("cpu")                  # still busy: the cached one serves
    assert machine["measured"] == 1
    machine.update(load=0.4, params=QUIET)
    again = calibrate.calibration("cpu")          # quiet now: measured again, replaced
    assert machine["measured"] == 2 and "unsettled" not in again
    assert "unsettled" not in read_cached("cpu")
    calibrate.calibration("cpu")                  # settled: never measured again
    assert machine["measured"] == 2


def test_noise_on_a_quiet_machine_is_unsettled_too(machine):
    machine.update(params=NOISY)
    assert calibrate.calibration("cpu")["unsettled"].startswith("band below zero: ")


def test_predict_says_when_its_constants_are_noise():
    led = blocks_ledger([100_000], [150_000])
    pol = [parse_policy("checkpoint:blocks.0")]
    assert predict(led, pol).calibration_unsettled == ""
    led.extra["calibration"][-1]["unsettled"] = "load average 9.3 on 2 cores"
    assert predict(led, pol).calibration_unsettled == "load average 9.3 on 2 cores"


def test_predict_says_when_the_traces_own_timings_are_noise():
    """Note [Timings taken on a busy machine] (trace/timing.py): the trace's probes ran at a
    load above the cores; that is said before the calibration's state."""
    led = blocks_ledger([100_000], [150_000], timing={"busy": "load average 5.8 on 2 cores"})
    pol = [parse_policy("checkpoint:blocks.0")]
    rep = predict(led, pol)
    assert (rep.timings_busy, rep.calibration_unsettled) == ("load average 5.8 on 2 cores", "")
    own = unsettled_line("this trace's own timings: load average 5.8 on 2 cores")
    assert time_caveats(rep)[0] == own
    # compare leaves its own trace's load out (its own runs made it), not the calibration's
    assert own not in time_caveats(rep, own_load=False)
    led.extra["calibration"][-1]["unsettled"] = "load average 9.3 on 2 cores"
    assert time_caveats(predict(led, pol), own_load=False)[0] == \
        unsettled_line("load average 9.3 on 2 cores")


def test_an_old_noisy_cache_is_measured_again_when_quiet(machine):
    """A cache written before the `unsettled` mark: its bands below zero tell."""
    from memledger.replay.calib_cache import machine_key, write_cached

    write_cached({"key": machine_key("cpu"), "device": "cpu", "params": NOISY}, "cpu")
    assert "unsettled" not in calibrate.calibration("cpu") and machine["measured"] == 1


def test_predict_says_when_a_band_is_noise(tmp_path, capsys):
    """A band many times its figure (a burst no load average caught) is said to be noise;
    `88.5 (0.6-7306.4)` ms was printed as if it were a range."""
    import json

    from memledger.cli import main
    from plan_ledgers import blocks_records

    recs = blocks_records([100_000], [150_000])
    for r in recs:
        if r["k"] == "calibration":
            r["params"] = {**r["params"], "ckpt_call_ns": {"median": 500.0, "lo": 1.0,
                                                           "hi": 5e8}}
    path = tmp_path / "wide.ledger"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["predict", str(path), "--policy", "checkpoint:blocks.0"]) == 0
    out = capsys.readouterr().out
    assert "spans more than 4x its figure" in " ".join(out.split())
