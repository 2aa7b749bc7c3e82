"""Rule 3 for `torch.linalg.lstsq` in a fake run: its outputs' sizes from the shapes and
the driver, the one value-dependent size taken at its upper bound.

# Note [A least-squares fit in a fake run]
torch tags `linalg_lstsq` `dynamic_output_shape`, and FakeTensorMode refuses it
(DynamicOutputShapeException), because one output's size can depend on values: the
`residuals` of the drivers that return them are (*, k) only when every matrix in A is of
full rank, else empty. Everything else follows from the shapes (A (*, m, n), B (*, m, k)
or (*, m)) and the driver (CPU default `gelsy`, CUDA `gels`), as the CPU kernel makes
them (torch 2.13, measured on (2, 5, 64, 8) and (2, 5, 64, 1) float32):

| output | gelsy | gels | gelsd, gelss |
|---|---|---|---|
| solution | (*, n, k): a view of a (*, max(m, n), k) column-major buffer | the same | the same |
| residuals | empty | (*, k) when m > n | (*, k) when m > n and A is of full rank |
| rank | (*) int64 | empty | (*) int64 |
| singular_values | empty | empty | (*, min(m, n)) |

So under gelsy and gels every size is known and the fake is exact; under gelsd and gelss
the residuals take their upper bound (full rank: a fit on data always is, near enough),
and the run notes a stand-in. Example: pykan's `KAN(width=[2, 5, 1], grid=5, k=3)` fits
its spline coefficients with `torch.linalg.lstsq(mat, y)` in `curve2coef` when it is made
and at every grid update; the library's bare `except:` swallowed FakeTensorMode's
refusal, printed "lstsq failed" and then raised UnboundLocalError, so `trace --fake` on
any KAN ended in exit 3 "script raised UnboundLocalError: cannot access local variable
'coef'" (tests/clients/train_kan_ema.py). The solution's buffer is 2,560 B there, not the
2,304 B of its (2, 5, 8, 1) shape: the kernel solves in place in a copy of B grown to
max(m, n) rows.
"""

from __future__ import annotations

import torch

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64,
            torch.complex32: torch.float16}


def _driver(a: torch.Tensor, driver: str | None) -> str:
    return driver or ("gelsy" if a.device.type == "cpu" else "gels")


def lstsq_outputs(a: torch.Tensor, b: torch.Tensor, rcond: float | None = None, *,
                  driver: str | None = None) -> tuple[torch.Tensor, ...]:
    """Fakes of `linalg_lstsq(a, b)`'s four outputs (Note [A least-squares fit in a fake
    run]): made inside FakeTensorMode, so they are fake tensors of the kernel's sizes."""
    drv = _driver(a, driver)
    vector = b.dim() == 1 or (b.dim() == a.dim() - 1 and b.shape == a.shape[:-1])
    rhs = b.unsqueeze(-1) if vector else b
    batch = torch.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    m, n, k = a.shape[-2], a.shape[-1], rhs.shape[-1]
    rows = max(m, n)
    dev, real = a.device, _REAL_OF.get(a.dtype, a.dtype)
    # the kernel's buffer: B copied column-major into max(m, n) rows, the first n the solution
    buf = torch.empty((*batch, k, rows), dtype=a.dtype, device=dev).transpose(-2, -1)
    solution = buf[..., :n, 0] if vector else buf[..., :n, :]
    # (a vector B keeps its one column in the residuals: (*, 1))
    residuals = torch.empty((*batch, k) if drv != "gelsy" and m > n else (0,), dtype=real,
                            device=dev)
    rank = torch.empty(tuple(batch) if drv != "gels" else (0,), dtype=torch.long, device=dev)
    singular = torch.empty((*batch, min(m, n)) if drv in ("gelsd", "gelss") else (0,),
                           dtype=real, device=dev)
    return solution, residuals, rank, singular


def lstsq_is_bound(a: torch.Tensor, b: torch.Tensor, rcond: float | None = None, *,
                   driver: str | None = None) -> bool:
    """Whether a size above is an upper bound rather than known: the residuals of gelsd
    and gelss, which a rank-deficient A leaves empty."""
    return _driver(a, driver) in ("gelsd", "gelss") and a.shape[-2] > a.shape[-1]
