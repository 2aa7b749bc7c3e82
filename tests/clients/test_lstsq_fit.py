"""A least-squares fit and losses logged through `.numpy()` in a fake run, pinned in plain
torch (tests/clients/train_lstsq_fit.py): Note [A least-squares fit in a fake run]
(memledger/trace/fake_lstsq.py) and Note [What `.numpy()` keeps]
(memledger/trace/fake_literals.py).

Measured (the helper hunt51c, 2026-12-07, torch 2.13.0 CPU, AMD EPYC (AVX2), one intra-op
thread; 2 steps): the real ledger 22,844 B = allocator, `checkpoint:1` 28,412 B and
`offload:*` 22,844 B predicted = measured. Before, `trace --fake --device cpu`: with
`--refit 2` exit 2 at the refit's `torch.linalg.lstsq` ("makes a tensor whose size depends
on its values"; pykan's bare `except:` turned the same into exit 3); without, the fake peak
22,840 B, 4 B under (step 1's logged loss, freed at once), and both policies with it.
"""

from __future__ import annotations

import pytest
import torch

from memledger.trace.fake_lstsq import lstsq_outputs
from tests.clients.harness import fake_client_gaps

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("argv", [[], ["--refit", "2", "--driver", "gelsd"]],
                         ids=["logged", "refit-gelsd"])
def test_a_fake_run_fits_by_least_squares_and_keeps_what_numpy_shares(argv):
    """The fake ledger is the real one, peak, categories and both policies; before, the
    refit stopped the fake run and the logged losses' 4 B storages were freed early."""
    assert fake_client_gaps("train_lstsq_fit.py", argv, ["checkpoint:1", "offload:*"]) == {}


@pytest.mark.parametrize("driver", [None, "gels", "gelsd", "gelss"])
@pytest.mark.parametrize("a, b", [((2, 5, 64, 8), (2, 5, 64, 1)), ((2, 6, 3), (1, 6, 2)),
                                  ((2, 6, 3), (2, 6)), ((6, 3), (6,)), ((3, 6), (3, 2))])
def test_lstsq_fakes_have_the_kernels_sizes_and_strides(driver, a, b):
    """Each output's shape, dtype, strides and storage bytes as the CPU kernel makes them
    (full-rank data, where gelsd's and gelss's residuals are their upper bound)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    A, B = torch.randn(a, generator=torch.Generator().manual_seed(0)), \
        torch.randn(b, generator=torch.Generator().manual_seed(1))

    def facts(ts):
        return [(tuple(t.shape), t.dtype, t.untyped_storage().nbytes(),
                 t.stride() if t.numel() else None) for t in ts]

    with FakeTensorMode() as mode:
        fake = lstsq_outputs(mode.from_tensor(A), mode.from_tensor(B), driver=driver)
    assert facts(fake) == facts(torch.linalg.lstsq(A, B, driver=driver))
