"""The last step's carried state, told by the name that holds it (Note [The last step's
state, by its holder], memledger/ledger/carried.py; Note [Who holds a saved storage at a
step's end], memledger/trace/step_holders.py)."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from memledger.ledger.carried import carried_names, carried_until
from memledger.ledger.step_marks import step_marks

# two steps: forward at 0 and 21, backward at 10 and 30, the step records at 20 and 40
PHASES = [{"ev": 0, "ph": "forward"}, {"ev": 10, "ph": "backward"},
          {"ev": 21, "ph": "forward"}, {"ev": 30, "ph": "backward"}]
STEPS = [{"ev": 20, "step": 1}, {"ev": 40, "step": 2}]


def _storages() -> pd.DataFrame:
    """sid 1: step 1's state (saved at 2, read back at 12, read by step 2's forward at 22,
    freed at 35); sid 2: step 2's state, sid 3: step 2's output (both saved, read back and
    held at the close); sid 4: step 1's output (saved at 5, read back at 11, held past
    step 1's end until step 2's forward returned, read by none of step 2)."""
    return pd.DataFrame({
        "freed":         [35, -1, -1, 28],
        "last_use":      [22, 32, 31, 11],
        "saved_ev":      [2, 23, 25, 5],
        "saved_last_ev": [2, 23, 25, 5],
        "unpack_ev":     [12, 32, 31, 11],
        "saves":         [1, 1, 1, 1],
        "unpacks":       [1, 1, 1, 1],
    }, index=pd.Index([1, 2, 3, 4], name="sid"))


def _until(holders: list) -> list[int]:
    df = _storages()
    return carried_until(df, np.ones(len(df), dtype=bool), step_marks(PHASES, STEPS),
                         holders).tolist()


def test_the_last_steps_state_is_the_one_its_name_held_before():
    """`h` held step 1's carried state at step 1's end and holds sid 2 at step 2's: sid 2
    is `other` from step 2's end; `out` held step 1's output, which step 2 never read:
    sid 3 stays an activation, as sid 4 does."""
    holders = [{"k": "holders", "step": 1, "ev": 20, "names": {"main:h": [1], "main:out": [4]}},
               {"k": "holders", "step": 2, "ev": 40,
                "names": {"main:h": [2], "main:out": [3], "main:carried": [1]}}]
    assert _until(holders) == [20, 40, -1, -1]


def test_without_holders_the_last_steps_saves_stay_activations():
    """An older ledger (no `holders` records): nothing says which of the last step's saves
    is carried, and none is taken by likeness; the step before's state is read by step 2,
    as before."""
    assert _until([]) == [20, -1, -1, -1]


def test_a_name_that_holds_a_state_carried_from_another_end_says_nothing():
    """At step 2's end `carried` holds sid 1, carried from step 1's end (20), not from the
    end the record is at; a name that held only such a storage before is no holder of a
    state (here at a record of an earlier end, 15: a step record of another optimizer)."""
    holders = [{"k": "holders", "step": 1, "ev": 15, "names": {"main:prev": [1]}},
               {"k": "holders", "step": 2, "ev": 40, "names": {"main:prev": [2]}}]
    assert _until(holders) == [20, -1, -1, -1]


class _Loop:
    def __init__(self) -> None:
        import torch

        self.state = torch.zeros(2)
        self._private = self.state

    def run(self, sid_of) -> dict[str, list[int]]:
        import torch

        from memledger.trace.step_holders import step_holders

        h = torch.zeros(2)                                  # noqa: F841 - read by the walk
        pair = (torch.ones(1), torch.zeros(2))              # noqa: F841
        named = {"k": torch.zeros(2)}                       # noqa: F841
        view = {"x": torch.zeros(2)}.values()               # noqa: F841
        _SIDS.update({id(h): 1, id(pair[1]): 2, id(named["k"]): 3,
                      id(next(iter(view))): 4, id(self.state): 5})
        return step_holders(sys._getframe(), sid_of)


_SIDS: dict[int, int] = {}


def test_step_holders_names_locals_items_and_a_receivers_attributes():
    """A frame's tensors by name: a local, a tuple's and a dict's items, a `dict_values`
    view's (HRM-pytorch hands its hidden states so), a method receiver's public
    attribute (not its private one); only storages `sid_of` knows."""
    got = _Loop().run(lambda t: _SIDS.get(id(t), -1))
    assert {k: v for k, v in got.items() if k.startswith("run:")} == {
        "run:h": [1], "run:pair[1]": [2], "run:named['k']": [3], "run:view[0]": [4],
        "run:self.state": [5]}


def test_a_carried_state_is_named_by_the_names_that_hold_it_at_its_end():
    """Note [A carried state, named by its holder]: each carried storage is named by the
    variables that hold it at the end it is carried from (the function dropped, every name
    in the record's order, once); `carried` at step 2 does not name sid 1, carried from
    step 1's end; a storage not carried, or carried with no record at its end, has none."""
    holders = [{"k": "holders", "step": 1, "ev": 20,
                "names": {"main:h": [1], "main:out": [4], "fn:self.h": [1]}},
               {"k": "holders", "step": 2, "ev": 40,
                "names": {"main:h": [2], "main:states[1]": [2], "main:out": [3],
                          "main:carried": [1]}}]
    df = _storages()
    until = carried_until(df, np.ones(len(df), dtype=bool), step_marks(PHASES, STEPS), holders)
    assert carried_names(df.index, until, holders).tolist() == [
        "h, self.h (carried by the script)", "h, states[1] (carried by the script)", "", ""]
    assert carried_names(df.index, until, holders[1:]).tolist() == [
        "", "h, states[1] (carried by the script)", "", ""]
    assert carried_names(df.index, until, []).tolist() == ["", "", "", ""]
