"""The correctness gates of `memledger compare`: baseline twice, then each candidate.

    report = run_gates("train.py", [], [Variant.of(p) for p in policies], steps=3)
    for o in report.outcomes:
        print(o.variant.label, o.passed, o.reason)

1. inputs, 2. gradients, 3. update: see memledger/verify/diff.py.
4. Baseline determinism: the baseline is captured twice. If its *inputs* differ between the
   two runs the script is not reproducible and nothing can be compared: every candidate is
   rejected at the inputs gate with the input named. If only its numbers differ, each
   tensor gets the limit `max(rtol, 10 × its relative difference between the two baseline
   runs at that step)` (see Note [Tolerance] in tolerance.py).

Default tolerance: bitwise on CPU; `CUDA_RTOL` relative on CUDA (kernels may choose other
algorithms between runs, e.g. split-K matmuls; see Note [Tolerance] in tolerance.py), and
on a baseline that ran torch.compile'd code (Note [Compiled code under the gates]).

# Note [Compiled code under the gates]
A policy's wrappers inside torch.compile'd code change the graph the compiler fuses, and
so the order of its floating-point work: under inductor, `offload:fc2` of
tests/clients/train_compiled.py, which moves no value, changed `fc2.bias`'s gradient by rel
6e-7, and bitwise gates rejected every policy for rounding. So a baseline that compiled
frames (`compiled` in the capture's meta) is judged within `CUDA_RTOL`, as on CUDA; a
defect (other dropout masks, a 1e-3 perturbation) sits orders of magnitude above it.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from memledger.errors import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    PolicyError,
    PolicyRefused,
    ScriptError,
)
from memledger.verify.diff import Comparison, Finding, compare
from memledger.verify.tolerance import (
    GENERATOR_CURES,
    NOISE_FACTOR,
    UNSEEDED,
    Tolerance,
    first_step_spread,
    noise_floors,
    seeded_drawn_apart,
    unseeded_generators,
)
from memledger.verify.runs import BASELINE, CaptureResult, Variant, capture_run

CUDA_RTOL = 1e-5    # relative to each tensor's max |value|; fp32 accumulation-order noise


@dataclass
class GateOutcome:
    """One candidate against the baseline."""

    variant: Variant
    comparison: Comparison | None = None
    failure: str = ""          # the script failed under the candidate (its reason)
    refused: bool = False      # ... because the policy was refused as it ran (exit 2 there)
    bad_input: bool = False    # not run: the policy is bad input here (a selector matching
    # no module): Note [One bad policy among several] (verify/compare.py)

    @property
    def passed(self) -> bool:
        return not self.failure and self.comparison is not None \
            and self.comparison.finding is None

    @property
    def gates(self) -> dict[str, bool]:
        if self.comparison is None:
            return {"inputs": False, "gradients": False, "update": False}
        return self.comparison.gates

    @property
    def reason(self) -> str:
        if self.bad_input:
            return f"not run: {self.failure}"
        if self.failure and self.refused:
            return f"refused: {self.failure}"
        if self.failure:
            return f"the script failed under this policy: {self.failure}"
        f = self.comparison.finding if self.comparison else None
        return f"{f.gate}: {f.message}" if f else "gates passed"


@dataclass
class GateReport:
    """Everything the gates found; `outcomes` in the order the candidates were given."""

    steps: int
    device: str
    tolerance: Tolerance
    noise_floor: float                  # 0.0: the baseline agrees with itself bitwise
    reproducible: bool                  # the baseline's inputs agree between its two runs
    outcomes: list[GateOutcome] = field(default_factory=list)
    note: str = ""
    frozen_changed: list[str] = field(default_factory=list)   # in the baseline itself


def _seed_cure(drawn: list[str], otherwise: str) -> str:
    """What to seed: the global generators two baseline runs drew apart, else `otherwise`."""
    if not drawn:
        return otherwise
    return ("seed " + " and ".join(f"{g}'s global generator ({GENERATOR_CURES[g]})"
                                   for g in drawn) + ", which the script draws from unseeded")


def _spread_cure(a: dict, b: dict, drawn: list[str]) -> str:
    """What to do about a baseline whose first step's gradients differ: seed what was
    drawn unseeded, and fix the choice that drew seeded generators apart (Note [Seeded
    alike, drawn apart], tolerance.py)."""
    apart = seeded_drawn_apart(a, b)
    if not apart:
        return _seed_cure(drawn, "seed every generator the script and its model use "
                                 "(torch.seed() draws from the OS)")
    named = " and ".join(f"{g}'s global generator" for g in apart)
    other = (f"{named}, seeded alike in both runs, drew other numbers in their first step: "
             "the runs took other code (a choice by the clock, as a library that times its "
             "alternatives and keeps the fastest, or by something else outside the script's "
             "seeds); fix that choice by its setting")
    return f"{_seed_cure(drawn, '')}; and {other}" if drawn else other


def run_gates(script: str | Path, argv: list[str], variants: list[Variant], steps: int,
              rtol: float | None = None, workdir: str | Path | None = None,
              runner: Callable[..., CaptureResult] = capture_run,
              progress: Callable[[str], None] | None = None) -> GateReport:
    """Capture the baseline twice and each variant once (fresh processes); compare them.

    `runner(script, argv, variant, steps, out)`: `capture_run` (a fresh process each); unit
    tests pass an in-process runner for tiny self-seeding scripts.
    """
    say = progress or (lambda msg: None)
    with tempfile.TemporaryDirectory(prefix="memledger-verify-", dir=workdir) as tmp:
        tmp = Path(tmp)
        base = [_baseline(runner, script, argv, steps, tmp / f"baseline{i}.capture")
                for i in (0, 1)]
        device = base[0]["meta"].get("device", "cpu")
        compiled = bool(base[0]["meta"].get("compiled"))   # Note [Compiled code under the
        tol = Tolerance(rtol if rtol is not None else     # gates]
                        (CUDA_RTOL if device.startswith("cuda") or compiled else 0.0))
        self_check = compare(base[0], base[1], Tolerance(0.0))
        # the steps compared: those the baseline ran, where the script stops before `steps`
        # (`compare` of a script run with `--steps 2` said "3 steps compared")
        report = GateReport(min(steps, len(base[0]["steps"])) or steps, device, tol, 0.0, True)
        report.frozen_changed = sorted({n for st in base[0]["steps"]
                                        for n in st["frozen_changed"]})
        f = self_check.finding
        if f is not None and f.gate == "inputs":
            report.reproducible = False
            # a sampler that shuffles with numpy's global generator (pytorch-metric-learning's
            # MPerClassSampler) is seeded there, not in the DataLoader (Note [A baseline
            # drawn anew] in tolerance.py names the generator the same way)
            cure = _seed_cure(unseeded_generators(base[0], base[1]), "seed the data loader")
            report.note = (f"the script's inputs are not reproducible: two baseline runs "
                           f"differ at step {f.step} on {f.name}; {cure}")
            why = Finding("inputs", f.step, f.name, report.note)
            report.outcomes = [GateOutcome(v, Comparison(f.step + 1, why, ("inputs",)))
                               for v in variants]
            return report
        if f is not None:
            floors = noise_floors(base[0], base[1])
            report.noise_floor = max(floors.values(), default=0.0)
            report.tolerance = Tolerance.with_noise(tol.rtol, floors)
            report.note = (f"the baseline does not agree with itself ({len(floors)} tensors "
                           f"differ, up to rel {report.noise_floor:.2g}); each is compared "
                           f"within {NOISE_FACTOR:g} × its own baseline difference")
            spread, name, worst = first_step_spread(base[0], base[1])
            drawn = unseeded_generators(base[0], base[1])
            if spread > UNSEEDED:   # Note [A baseline drawn anew] (tolerance.py)
                cure = _spread_cure(base[0], base[1], drawn)
                report.note = (f"the baseline draws other random numbers in each run: its "
                               f"gradients differ at step 0 by a median rel {spread:.2g} (up "
                               f"to {worst:.2g} on {name}), more than rounding makes, so no "
                               f"policy can be judged; {cure}")
                why = Finding("gradients", 0, name, report.note)
                report.outcomes = [GateOutcome(v, Comparison(1, why, ("gradients",)))
                                   for v in variants]
                return report
            if drawn:   # Note [A few tensors drawn anew] (tolerance.py)
                report.note = (f"the baseline draws other random numbers in each run: "
                               f"{f.name} differs at step {f.step} ({f.gate}), drawn from "
                               f"a global generator the script leaves unseeded, so no "
                               f"policy can be judged; {_seed_cure(drawn, '')}")
                why = Finding(f.gate, f.step, f.name, report.note)
                report.outcomes = [GateOutcome(v, Comparison(f.step + 1, why, (f.gate,)))
                                   for v in variants]
                return report
        for i, v in enumerate(variants):
            say(f"gates: capturing {v.label}")
            try:
                res = runner(script, argv, v, steps, tmp / f"candidate{i}.capture")
            except PolicyError as e:   # Note [One bad policy among several] (compare.py)
                refused = isinstance(e, PolicyRefused)
                report.outcomes.append(GateOutcome(
                    v, failure=str(e).removeprefix("memledger: "), refused=refused,
                    bad_input=not refused))
                continue
            if res.code == EXIT_INTERNAL:   # memledger's own hook failed: no verdict
                raise ScriptError(res.reason, exit_code=EXIT_INTERNAL)
            if res.code != EXIT_OK or res.data is None:
                sys.stderr.write(res.output)   # the script's traceback under the policy
                report.outcomes.append(GateOutcome(v, failure=res.reason,
                                                   refused=res.code == EXIT_USAGE))
                continue
            report.outcomes.append(GateOutcome(v, _began_elsewhere(
                base[0], res.data, compare(base[0], res.data, report.tolerance))))
        if f is None and any(o.comparison is not None and not o.passed
                             for o in report.outcomes):
            # Note [A few tensors drawn anew] (tolerance.py): the baseline's two runs drew
            # alike by chance, a candidate's run need not
            drawn = unseeded_generators(base[0], base[1])
            if drawn:
                report.note = ("the script draws from a global generator it leaves "
                               "unseeded: the baseline's two runs drew alike, a candidate's "
                               "run may draw otherwise, so a rejection here may be that draw "
                               f"and not the policy; {_seed_cure(drawn, '')}")
        return report


# Note [A run that began elsewhere]
# A policy acts on the forward and the backward; the weights the script makes before its
# first step are the script's alone. pykan's KAN fits its spline coefficients by
# `torch.linalg.lstsq` as it is made, and LAPACK's rounding there follows where the
# process's allocations fall: the baseline's two runs (the same allocations in each) agreed
# bitwise, a run under a policy (memledger's wrappers allocate too) began with
# `act_fun.0.coef` 7.5e-9 away, and `compare` rejected all three policies, offload too, as
# "gradient of act_fun.1.scale_sp differs at step 0: max abs 1.49e-08, rel 1.49e-07
# (bitwise)" (tests/clients/train_kan_ema.py --model kan). A capture keeps each weight's
# digest before the first step (`start`); a candidate that fails the gradients or update
# gate and began from other weights is told so: the difference is not the policy's, and
# bitwise gates cannot judge it. It stays rejected (nothing was shown equal), with the cure.
def _began_elsewhere(base: dict, cand: dict, comparison: Comparison) -> Comparison:
    f = comparison.finding
    start, other = base.get("start") or {}, cand.get("start") or {}
    moved = [n for n, d in start.items() if n in other and other[n] != d]
    if f is None or f.gate == "inputs" or not moved:
        return comparison
    names = ", ".join(f"`{n}`" for n in moved[:3]) + (f" and {len(moved) - 3} more"
                                                      if len(moved) > 3 else "")
    comparison.finding = Finding(
        f.gate, f.step, f.name,
        f"{f.message}; but this run began from other weights: {names} differed before the "
        "first step, which no policy touches (the script's initialization is not the same "
        "from one process to the next: a solve or a BLAS call whose rounding follows the "
        "memory layout), so the difference is not the policy's; compare within a tolerance "
        "(--rtol 1e-5) or load the initial weights from a file", f.diff,
        f.missing_gradient)
    return comparison


def _baseline(runner, script, argv, steps: int, out: Path) -> dict:
    res = runner(script, argv, BASELINE, steps, out)
    if res.code != EXIT_OK or res.data is None:
        sys.stderr.write(res.output)   # the script's own traceback, as Python printed it
        raise ScriptError(f"the baseline run failed ({res.reason}); fix the script so that "
                          f"it trains {steps} steps on its own", exit_code=res.code or 3)
    return res.data
