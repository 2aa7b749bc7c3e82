"""Note [Two passes, other random numbers?] (memledger/trace/rng_state.py): each pass's
digests of the global generators at its start and after the last measured step; `show`
names a generator both passes drew from and left apart, where the peaks differ."""

from __future__ import annotations

from rich.console import Console

from memledger.ledger.model import Ledger
from memledger.report.terminal import summary_notes

# the ledger pass's generators at its start and after step 1; numpy drawn (a sampler),
# Python's random untouched (its start differs in each process, its end is its start)
LEDGER_RNG = {"k": "rng", "step": 1,
              "start": {"torch": "t0", "numpy": "n-a", "random": "r-a"},
              "end": {"torch": "t1", "numpy": "n-a1", "random": "r-a"}}


def _ledger(allocator_rng: dict | None, measured: int, ledger_rng: dict | None = LEDGER_RNG,
            compiles: int = 0):
    """1000 B made at setup, 400 B in the step: the ledger's peak is 1400 B. `compiles`:
    the frames the allocator pass compiled (its `compiles` record)."""
    recs = [
        {"k": "header", "schema": "memledger.ledger/1"},
        {"k": "phase", "ev": 0, "ph": "setup", "step": 1},
        {"k": "alloc", "sid": 0, "ev": 0, "bytes": 1000, "dtype": "float32", "shape": [250],
         "op": "empty", "mod": "", "ph": "setup", "step": 1},
        {"k": "role", "sid": 0, "role": "parameter", "name": "w"},
        {"k": "phase", "ev": 1, "ph": "forward", "step": 1},
        {"k": "alloc", "sid": 1, "ev": 1, "bytes": 400, "dtype": "float32", "shape": [100],
         "op": "aten.mul.default", "mod": "", "ph": "forward", "step": 1},
        {"k": "free", "sid": 1, "ev": 2, "last": 1},
        {"k": "step", "step": 1, "ev": 2, "ns": 1000},
    ]
    if ledger_rng is not None:
        recs.append(ledger_rng)
    recs.append({"k": "measured", "source": "cpu-profiler", "device": "cpu",
                 "peak_bytes": measured,
                 **({"rng": allocator_rng} if allocator_rng is not None else {})})
    if compiles:
        recs.append({"k": "compiles", "frames": compiles})
    recs.append({"k": "end", "ev": 3, "status": "ok"})
    return Ledger.from_records(recs)


def _said(led: Ledger) -> str:
    con = Console(width=300, record=True)
    for line in summary_notes(led.summary()):
        con.print(line)
    return " ".join(con.export_text().split())


def test_a_generator_both_passes_drew_apart_is_named_where_the_peaks_differ():
    other = {"step": 1, "start": {"torch": "t0", "numpy": "n-b", "random": "r-b"},
             "end": {"torch": "t1", "numpy": "n-b1", "random": "r-b"}}
    led = _ledger(other, measured=1352)                  # 48 B under the ledger's 1400
    assert led.summary().measured.generators_apart == ["numpy"]
    assert ("Warning: the two runs of the script drew other random numbers from numpy's "
            "global generator, which it does not seed (a sampler, an augmentation, a random "
            "choice?): they may have run on other data, and their peaks do not compare; "
            "seed it (np.random.seed)") in _said(led)
    # the same draws, the same peak: named in the JSON, nothing said
    led = _ledger(other, measured=1400)
    assert led.summary().measured.generators_apart == ["numpy"]
    assert "random numbers" not in _said(led)


def test_seeded_generators_other_steps_and_older_ledgers_name_none():
    same = {"step": 1, **{k: LEDGER_RNG[k] for k in ("start", "end")}}
    assert _ledger(same, 1352).summary().measured.generators_apart is None
    # the allocator pass stopped after another step: nothing to compare
    later = {**same, "step": 2, "end": {"torch": "x", "numpy": "y", "random": "z"}}
    assert _ledger(later, 1352).summary().measured.generators_apart is None
    # ledgers written before the record
    assert _ledger(None, 1352, ledger_rng=None).summary().measured.generators_apart is None
    assert "random numbers" not in _said(_ledger(None, 1352, ledger_rng=None))


def test_torchs_generator_is_not_compared_where_the_allocator_pass_compiled():
    """Note [Compiled random ops draw otherwise] (memledger/ledger/summary.py): the ledger
    pass ran the compiled code eagerly, and inductor's random ops draw from torch's
    generator otherwise; a seeded script read "which it does not seed ... seed it
    (torch.manual_seed)". numpy's is still named."""
    other = {"step": 1, "start": {"torch": "t0", "numpy": "n-b", "random": "r-b"},
             "end": {"torch": "t2", "numpy": "n-b1", "random": "r-b"}}
    led = _ledger(other, measured=1352)
    assert led.summary().measured.generators_apart == ["numpy", "torch"]
    compiled = _ledger(other, measured=1352, compiles=11)
    assert compiled.summary().measured.generators_apart == ["numpy"]
    assert "torch's" not in _said(compiled)
    assert "from numpy's global generator, which it does not seed" in _said(compiled)

