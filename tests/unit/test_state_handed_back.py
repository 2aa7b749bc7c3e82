"""Note [A state a call hands back] (memledger/doctor/source.py): the line of a state a
model hands back with its output, `out, h = model(x, h)`."""

from memledger.doctor.source import accumulation_line

SCRIPT = """\
class Cell:
    def forward(self, x, h):
        h = tanh(x + h)
        return h.sum(), h


h = zeros()
for step in range(3):
    if fixed:
        h = h.detach()
    out, h = model(x, h)
    loss = out.pow(2).mean()
    first, *rest, last = pieces(x, last)
"""


def test_a_tuple_target_binds_each_name_and_a_module_global_is_looked_for_first(tmp_path):
    """GIVEN a module-level loop that rebinds `h` by a tuple (line 11) and a model whose
    forward binds its own local `h` (line 3) WHEN the line of the global `h` is asked (`at`
    0: a module's globals) THEN it is the tuple's line: it was the forward's line 3 (the
    tuple skipped, the whole file searched), and `out`'s was 0 (no line)."""
    f = tmp_path / "train.py"
    f.write_text(SCRIPT)
    assert accumulation_line(str(f), "h") == 11
    assert accumulation_line(str(f), "out") == 11
    assert accumulation_line(str(f), "last") == 13   # a starred tuple's names too
    # a function's own variable: its own statements (the forward's line 3)
    assert accumulation_line(str(f), "h", at=4) == 3


def test_a_state_fed_back_is_a_call_that_reads_it_not_a_detach_or_a_sum(tmp_path):
    from memledger.doctor.source import state_fed_back

    f = tmp_path / "train.py"
    f.write_text(SCRIPT + "total = total + out\nmem = mem._replace(long=mem.long.detach())\n")
    assert state_fed_back(str(f), 11, "h")            # out, h = model(x, h)
    assert not state_fed_back(str(f), 11, "out")      # the call reads no `out`
    assert not state_fed_back(str(f), 10, "h")        # h = h.detach()
    assert not state_fed_back(str(f), 14, "total")    # a sum: an accumulation's advice
    assert not state_fed_back(str(f), 15, "mem")      # detached where it is rebound


def test_a_module_list_filled_by_a_function_is_the_modules(tmp_path):
    """`LOSSES.append(loss)` in a function fills the module's list (not a binding of a
    local): the module-level `LOSSES = []` does not hide it; a function that declares
    `global total` binds the module's `total`."""
    f = tmp_path / "log.py"
    f.write_text("LOSSES = []\ntotal = 0\n\n\ndef log_loss(loss):\n    LOSSES.append(loss)\n"
                 "\n\ndef add(loss):\n    global total\n    total += loss\n\n\n"
                 "def other(loss):\n    total = loss + 1\n")
    assert accumulation_line(str(f), "LOSSES") == 6
    assert accumulation_line(str(f), "total") == 11
