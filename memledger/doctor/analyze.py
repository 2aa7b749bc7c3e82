"""All checks over one run's probe records: `diagnose(records) -> DoctorReport` (no torch)."""

from __future__ import annotations

from typing import Callable

from memledger.doctor import (accumulation, garbage, graph, losses, modes, order, params,
                              penalty, retention, rng, unused, updates)
from memledger.doctor.findings import DoctorReport, Finding
from memledger.doctor.records import Record, Run

CheckFn = Callable[[Run], list[Finding]]

ALL_CHECKS: tuple[CheckFn, ...] = (
    graph.cut_graph,                    # 1
    graph.no_history,                   # 1
    params.frozen_moving,               # 2
    params.optimizer_membership,        # 2
    params.stale_optimizer,             # 2
    params.optimizer_reset,             # 2
    params.wasted_gradients,            # 2
    params.detached_in_place,           # 2
    graph.grad_leak,                    # 3
    graph.mixed_gradient,               # 3
    accumulation.token_denominator,     # 4
    accumulation.loss_not_divided,      # 4
    accumulation.short_accumulation,    # 4
    updates.nonfinite_and_zeroed,       # 5
    updates.dropped,                    # 5
    updates.no_update,                  # 5
    updates.no_gradient,                # 5
    updates.schedulers,                 # 5
    retention.cross_step_retention,     # 6
    modes.eval_mode,                    # 7
    modes.eval_path,                    # 7
    order.double_step,                  # 8
    order.clip_order,                   # 8
    order.written_after_step,           # 8
    penalty.dead_penalty,               # 9
    losses.double_activation,           # 12
    losses.broadcast_target,            # 12
    losses.not_log_probs,               # 12
    losses.kl_div_mean,                 # 12
    rng.rng_reset,                      # 13
    garbage.cyclic_garbage,             # 10
    unused.unused_graph,                # 11
)


def diagnose(records: list[Record]) -> DoctorReport:
    run = Run.of(records)
    findings = [f for check in ALL_CHECKS for f in check(run)]
    return DoctorReport.of(findings, run.n_steps, run.n_optimizer_steps, run.steps_by)
