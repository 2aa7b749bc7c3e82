"""Note [A frame evaluator left installed] (tests/conftest.py): after a failed fullgraph
`torch.compile`, the caller of a Python function keeps its arguments until the call
returns, and a trace in that process measures it, to the byte (ledger = allocator)."""

from __future__ import annotations

import torch

import memledger
from tests.conftest import python_calls_inlined
from tests.unit.test_compiled_regions import _in_a_child


def _drops_its_argument(t: torch.Tensor) -> torch.Tensor:
    del t                                   # the 1,024 B argument: freed here, if nothing
    return torch.ones(2048).sum()           # else holds it; 8,192 B + 4 B made after


def _peaks() -> str:
    with memledger.trace(measure=True) as led:
        _drops_its_argument(torch.ones(256))
    return f"{python_calls_inlined()} {led.peak().bytes} {led.measured['peak_bytes']}"


def _after_a_failed_fullgraph_compile() -> str:
    f = torch.compile(lambda x: (torch._C._autograd._top_saved_tensors_default_hooks(False),
                                 x + 1)[1], fullgraph=True, backend="eager")
    try:
        f(torch.ones(2))
    except Exception as e:   # torch._dynamo.exc.Unsupported
        assert type(e).__name__ == "Unsupported", e
    return _peaks()


def test_a_failed_fullgraph_compile_keeps_call_arguments_alive_and_the_ledger_sees_it():
    assert _in_a_child(_peaks) == "True 8196 8196"
    # the argument's 1,024 B held through the call
    assert _in_a_child(_after_a_failed_fullgraph_compile) == "False 9220 9220"
    assert python_calls_inlined()   # this process: untouched
