"""Tensors a library makes at import and keeps as default argument values, as
flow_matching's `MixtureDiscreteEulerSolver.sample(..., time_grid=torch.tensor([0.0,
1.0]))` does under `@torch.no_grad()` on a class whose metaclass is ABCMeta
(tests/clients/test_made_at_import.py)."""

import abc

import torch


def sample(x: torch.Tensor, grid: torch.Tensor = torch.tensor([0.0, 1.0])) -> torch.Tensor:
    return x * grid[-1]


class Solver(abc.ABC):
    @torch.no_grad()
    def sample(self, x: torch.Tensor, *, grid: torch.Tensor = torch.ones(3)) -> torch.Tensor:
        return x * grid.sum()
