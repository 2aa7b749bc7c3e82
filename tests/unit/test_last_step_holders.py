"""The last step's carried state, told by the name that holds it (Note [The last step's
state, by its holder], memledger/ledger/carried.py; Note [Who holds a saved storage at a
step's end], memledger/trace/step_holders.py)."""

from __future__ import annotations

import os
import sys
import sysconfig
from collections import deque

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
        kept = deque([torch.zeros(1)], maxlen=3)            # noqa: F841
        _SIDS.update({id(h): 1, id(pair[1]): 2, id(named["k"]): 3,
                      id(next(iter(view))): 4, id(self.state): 5, id(kept[0]): 6})
        return step_holders(sys._getframe(), sid_of)[0]


_SIDS: dict[int, int] = {}


def test_step_holders_names_locals_items_and_a_receivers_attributes():
    """A frame's tensors by name: a local, a tuple's and a dict's items, a `dict_values`
    view's (HRM-pytorch hands its hidden states so), a deque's, a method receiver's public
    attribute (not its private one); only storages `sid_of` knows. A frame of a module
    other than the script's `__main__` is named with its module (Note [A loop a library
    runs])."""
    got = _Loop().run(lambda t: _SIDS.get(id(t), -1))
    fn = f"{__name__}.run"
    assert {k: v for k, v in got.items() if k.startswith(fn + ":")} == {
        f"{fn}:h": [1], f"{fn}:pair[1]": [2], f"{fn}:named['k']": [3], f"{fn}:view[0]": [4],
        f"{fn}:kept[0]": [6], f"{fn}:self.state": [5]}


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


# a stand-in library (Note [A loop a library runs]): a function compiled under the
# interpreter's site-packages, whose frames are a library's; it calls back into the
# script (`step`), as a trainer calls the optimizer whose hook ends the step
_LIB = os.path.join(sysconfig.get_paths()["purelib"], "memledger_test_tbptt", "loop.py")
_FIT = """
def fit(step):
    h = make()
    return step()
"""


def test_step_holders_reads_the_library_frames_the_step_passes_through():
    """The step ends in the script's callback, below a library's loop: the library's frame
    is read too, named `module.function:variable` with the module its path under
    site-packages, and listed in `libs`, innermost first (the callback's closure names the
    state too)."""
    import torch

    from memledger.trace.step_holders import step_holders

    state = torch.zeros(3)
    ns = {"make": lambda: state}
    exec(compile(_FIT, _LIB, "exec"), ns)

    def step():
        with torch.no_grad():
            return step_holders(sys._getframe(), lambda t: 7 if t is state else -1)

    held, libs = ns["fit"](step)
    assert held == {f"{__name__}.step:state": [7], "memledger_test_tbptt.loop.fit:h": [7],
                    f"{__name__}.test_step_holders_reads_the_library_frames_the_step_"
                    "passes_through:state": [7]}
    assert libs == ["memledger_test_tbptt.loop.fit"]


def test_one_variable_name_in_two_functions_is_two_holders():
    """Note [One name, one holder]: `main:h` and `train_chunk:h` both hold saved storages
    in the run, so the state `train_chunk` carries is named with its function; a library's
    name always is, with the library (the record's `libs`); a name only one function
    holds (`states[1]`) stays the variable alone."""
    holders = [{"k": "holders", "step": 1, "ev": 20,
                "names": {"train_chunk:h": [1], "train_chunk:out": [4]}},
               {"k": "holders", "step": 2, "ev": 40,
                "names": {"train_chunk:h": [2], "main:states[1]": [2], "main:h": [1]}}]
    df = _storages()
    until = carried_until(df, np.ones(len(df), dtype=bool), step_marks(PHASES, STEPS), holders)
    assert until.tolist() == [20, 40, -1, -1]
    assert carried_names(df.index, until, holders).tolist() == [
        "train_chunk.h (carried by the script)",
        "train_chunk.h, states[1] (carried by the script)", "", ""]
    lib = [{"k": "holders", "step": 1, "ev": 20, "names": {"pkg.loop.fit:h": [1]},
            "libs": ["pkg.loop.fit"]},
           {"k": "holders", "step": 2, "ev": 40, "names": {"pkg.loop.fit:h": [2]},
            "libs": ["pkg.loop.fit"]}]
    until = carried_until(df, np.ones(len(df), dtype=bool), step_marks(PHASES, STEPS), lib)
    assert carried_names(df.index, until, lib).tolist() == [
        "fit.h (carried by pkg)", "fit.h (carried by pkg)", "", ""]


def test_a_step_before_product_held_as_an_item_at_the_close_is_kept():
    """Note [A history the script keeps]: sid 5, made in step 1 (at 15), held at the close;
    held by `losses[0]` in the last end's `products` it is the script's (kept over the last
    step), held by a variable only (`loss`, a closure's hand-back) it is not; sid 6, made
    in the last step and held as an item too, is the step's own either way."""
    from memledger.ledger.held_roles import held_as_items, kept_across_a_step

    marks = step_marks(PHASES, STEPS)
    index = pd.Index([5, 6], name="sid")
    created, freed = np.array([15, 35]), np.array([-1, -1])

    def kept(products):
        holders = [{"k": "holders", "step": 2, "ev": 40, "names": {}, "products": products}]
        items = held_as_items(index, holders, 40)
        return kept_across_a_step(created, freed, created, marks, None, items).tolist()

    assert kept({"main:losses[0]": [5], "main:losses[1]": [6]}) == [True, False]
    assert kept({"main:loss": [5]}) == [False, False]
    assert kept_across_a_step(created, freed, created, marks).tolist() == [False, False]


def test_a_state_no_op_saved_is_carried_as_a_saved_one():
    """Note [A state no op saved]: unsaved products of a step's forward (no saves, no
    unpacks). sid 5: step 1's state, made at 3, read by step 2's forward at 22, freed at
    35: `other` from step 1's end (20). sid 6: step 2's, held at the close by `h`, which
    held sid 5 (in `made`) at step 1's end: from 40. sid 7: step 1's loss, printed at 24
    in the loss phase after step 2's forward began: not read by a forward, stays. sid 8:
    step 2's output, held at the close by `out`, which never held a carried state: stays.
    sid 9: made in step 1's update (15, after its backward), read by step 2's forward:
    no product of the forward, stays (Note [Read by the next step] reads those)."""
    phases = PHASES[:3] + [{"ev": 24, "ph": "loss"}] + PHASES[3:]
    df = pd.DataFrame({
        "created":       [3, 23, 6, 26, 15],
        "freed":         [35, -1, 36, -1, 37],
        "last_use":      [22, 26, 24, 27, 22],
        "saved_ev":      [-1] * 5, "saved_last_ev": [-1] * 5, "unpack_ev": [-1] * 5,
        "saves":         [0] * 5, "unpacks": [0] * 5,
    }, index=pd.Index([5, 6, 7, 8, 9], name="sid"))
    in_fwd = np.array([True, True, False, True, True])   # phase at each last use: 22 and
    holders = [{"k": "holders", "step": 1, "ev": 20, "names": {},   # 26, 27 forward; 24 loss
                "made": {"main:h": [5], "main:loss": [7]}},
               {"k": "holders", "step": 2, "ev": 40, "names": {},
                "made": {"main:h": [6], "main:out": [8]}}]
    until = carried_until(df, np.zeros(len(df), dtype=bool), step_marks(phases, STEPS),
                          holders, np.ones(len(df), dtype=bool), in_fwd)
    assert until.tolist() == [20, 40, -1, -1, -1]
    assert carried_names(df.index, until, holders).tolist() == [
        "h (carried by the script)", "h (carried by the script)", "", "", ""]


def test_a_state_the_script_and_a_library_both_hold_is_the_scripts():
    """Note [The holder a user acts on]: a state held by a library's frame and the
    script's is named by the script's names alone, `carried by the script` (it was every
    holder under the script); one a library alone holds keeps the library's name; a
    library's `h` makes no script's `h` one of two holders (Note [One name, one
    holder])."""
    both = [{"k": "holders", "step": 1, "ev": 20, "libs": ["pkg.loop.fit"],
             "names": {"pkg.loop.fit:h": [1], "main:h": [1]}},
            {"k": "holders", "step": 2, "ev": 40, "libs": ["pkg.loop.fit"],
             "names": {"pkg.loop.fit:h": [2]}}]
    df = _storages()
    until = carried_until(df, np.ones(len(df), dtype=bool), step_marks(PHASES, STEPS), both)
    assert until.tolist() == [20, 40, -1, -1]
    assert carried_names(df.index, until, both).tolist() == [
        "h (carried by the script)", "fit.h (carried by pkg)", "", ""]


def test_a_state_read_last_outside_a_forward_is_carried_where_it_makes_the_next():
    """Note [A state the script updates outside the forward]: sid 1, a buffer made in step
    1's loss phase (6), read last in step 2's loss phase (26), where it makes sid 2
    (`buf * 0.5`), whose last read (27) makes sid 3, step 2's buffer, held at the close:
    sid 1 `other` from step 1's end, sid 3 from step 2's (its name held sid 1). sid 4,
    step 1's loss, read last by an `.item()` at 29 that makes nothing: stays."""
    phases = [{"ev": 0, "ph": "forward"}, {"ev": 5, "ph": "loss"},
              {"ev": 10, "ph": "backward"}, {"ev": 21, "ph": "forward"},
              {"ev": 25, "ph": "loss"}, {"ev": 30, "ph": "backward"}]
    df = pd.DataFrame({
        "created":  [6, 26, 27, 8],
        "freed":    [28, 28, -1, 35],
        "last_use": [26, 27, 27, 29],
        "saved_ev": [-1] * 4, "saved_last_ev": [-1] * 4, "unpack_ev": [-1] * 4,
        "saves":    [0] * 4, "unpacks": [0] * 4,
    }, index=pd.Index([1, 2, 3, 4], name="sid"))
    holders = [{"k": "holders", "step": 1, "ev": 20, "names": {},
                "made": {"main:buf": [1], "main:loss": [4]}},
               {"k": "holders", "step": 2, "ev": 40, "names": {},
                "made": {"main:buf": [3]}}]
    until = carried_until(df, np.zeros(len(df), dtype=bool), step_marks(phases, STEPS),
                          holders, np.ones(len(df), dtype=bool),
                          np.zeros(len(df), dtype=bool))
    assert until.tolist() == [20, -1, 40, -1]
    assert carried_names(df.index, until, holders).tolist() == [
        "buf (carried by the script)", "", "buf (carried by the script)", ""]
