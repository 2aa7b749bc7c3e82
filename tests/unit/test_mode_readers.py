"""Which modules may read a `training` flag in their forward (Note [Which modules read a
training flag], memledger/trace/mode_readers.py): the modules a re-run in another mode
refuses for (Note [A re-run in another mode], memledger/trace/modes.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memledger.trace.mode_readers import reads_a_flag


def _dropout_of(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return F.dropout(x, 0.1, m.training)


class PlainBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.fc, self.act = nn.LayerNorm(4), nn.Linear(4, 4), nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(self.norm(x)))


class ReadsInAHelper(nn.Module):
    def _scale(self) -> float:
        return 0.1 if self.training else 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self._scale() * torch.randn_like(x)


class ReadsThroughAFunction(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _dropout_of(self, x)


class ReadsItsChild(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) if self.fc.training else x


class ReadsByName(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flag = (lambda: getattr(self, "training"))()   # a nested code object, a string
        return x * flag


def test_torchs_modules_that_read_a_flag_and_those_that_do_not():
    readers = [nn.Dropout(), nn.BatchNorm1d(4), nn.InstanceNorm1d(4), nn.RReLU(),
               nn.LSTM(4, 4), nn.MultiheadAttention(4, 1), nn.TransformerEncoderLayer(4, 1)]
    others = [nn.Linear(4, 4), nn.GELU(), nn.LayerNorm(4), nn.Conv2d(1, 1, 1),
              nn.Embedding(3, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU()), PlainBlock()]
    assert [type(m).__name__ for m in readers if not reads_a_flag(m)] == []
    assert [type(m).__name__ for m in others if reads_a_flag(m)] == []


def test_a_custom_module_reading_its_flag_anywhere_in_its_code():
    for m in (ReadsInAHelper(), ReadsThroughAFunction(), ReadsItsChild(), ReadsByName()):
        assert reads_a_flag(m), type(m).__name__


def test_what_an_instance_holds_counts():
    """spectral_norm's forward pre-hook reads `module.training`; a TorchScript module's
    code is no Python code; an instance's own forward reading it."""
    assert reads_a_flag(nn.utils.spectral_norm(nn.Linear(4, 4)))
    assert reads_a_flag(torch.jit.script(nn.Linear(4, 4)))
    m = nn.Linear(4, 4)
    assert not reads_a_flag(m)
    m.forward = lambda x: x if m.training else 2 * x
    assert reads_a_flag(m)
