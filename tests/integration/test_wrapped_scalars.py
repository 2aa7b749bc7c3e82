"""Note [Wrapped scalars] (trace/scalars.py): a Python number handed to an op whose schema
takes a Tensor is wrapped in a 0-dim CPU tensor the dispatch mode never sees, and cast
inside the op to the op's dtype; the allocator counts both."""

from __future__ import annotations

import torch

import memledger


def test_python_numbers_wrapped_as_tensors_are_counted_at_their_op():
    with memledger.trace() as led:
        x = torch.ones(1024)                              # 4,096 B
        y = x / 3.0                                       # 4,096 B; 8 B double + 4 B float cast
        y.mul_(0.5)                                       # 8 + 4
        z = torch.ones(4, dtype=torch.float64) * 0.5      # 8 (a double needs no cast)
        w = torch.ones(4, dtype=torch.bfloat16) + 1       # 8 B int64 + 2 B bfloat16 cast
        z.pow(2)                                          # pow.Tensor_Scalar: a Scalar, nothing
        v = x + True                                      # 1 B bool + 4 B float cast
        del x, y, z, w, v
    (rec,) = led.extra["scalars"]
    assert rec["bytes"] == [12, 12, 8, 10, 5]
    # the peak is at `x + True`: x, y, z (32 B), w (8 B) and v live, with v's 1 + 4 B
    # (measured with the CPU profiler: 1 B before `aten::add`, 4 B inside it)
    assert led.peak().bytes == 3 * 4096 + 32 + 8
    assert led.peak_with_scratch() == 3 * 4096 + 32 + 8 + 5


def test_a_wrapped_number_autograd_saves_lives_until_its_node_goes():
    """Note [Wrapped scalars saved for backward]: `x / 3.0` saves its divisor, the 8 B
    wrapped double, for backward (no saved-tensor hook sees a wrapped number), and the node
    frees it after its backward; that backward's `grad / other` hands the same tensor back,
    so only the 4 B float cast is new there (CPU profiler: 8 B before the forward `div`,
    freed in `evaluate_function: DivBackward0`; 4 B inside the backward `div`)."""
    with memledger.trace() as led:
        x = torch.ones(1024, requires_grad=True)      # 4,096 B
        y = x / 3.0                                   # saves 3.0: 8 B
        z = (y * 2.0).sum()                           # saves 2.0: 8 B
        z.backward()
    s = led.storages
    saved = s[s["op"] == "(wrapped number)"]
    assert saved["bytes"].tolist() == [8, 8]
    assert set(saved["category"]) == {"activation"}
    # each goes after its node's backward ran: MulBackward0 first, then DivBackward0
    assert (saved["freed"] > saved["created"]).all()
    assert saved["freed"].tolist()[0] > saved["freed"].tolist()[1]
    (rec,) = led.extra["scalars"]
    assert rec["bytes"] == [4, 4, 4, 4]    # forward div, mul; backward mul, div: the casts


def test_numbers_an_op_wraps_itself_are_counted_at_their_op():
    """Note [Numbers an op wraps itself]: a `.Scalar` overload takes the number as a Scalar
    and its kernel wraps it (8 B double + 4 B float cast): CPU dropout's `div_.Scalar` on
    its mask, Python's `x > 0.5` (`gt.Scalar`) and `1 - x` (`rsub.Scalar`); an int64
    tensor compared with an int needs no cast, and `pow.Tensor_Scalar` allocates nothing.
    Before, none was counted: the ledger with scratch read 8,192 B, the profiler 8,204 B."""
    import torch.nn.functional as F

    with memledger.trace(measure=True) as led:
        x = torch.ones(1024)                          # 4,096 B
        F.dropout(x, 0.5, True, inplace=True)         # mask 4,096 B; div_.Scalar: 8 + 4
        s = torch.ones(8)                             # 32 B
        m = s > 0.5                                   # 8 B; gt.Scalar: 8 + 4
        k = torch.zeros(4, dtype=torch.int64) == 0    # 4 B; 8
        y = 1 - s                                     # 32 B; rsub.Scalar: 8 + 4
        s.pow(2.0)                                    # 32 B; pow.Tensor_Scalar: nothing
        del x, s, m, k, y
    (rec,) = led.extra["scalars"]
    assert rec["bytes"] == [12, 12, 8, 12]
    assert led.peak().bytes == 8192                   # x and the mask, at the div_
    assert led.peak_with_scratch() == 8192 + 12 == led.measured["peak_bytes"]


def test_inputs_an_op_casts_are_counted_at_their_op():
    """Note [Inputs an op casts] (trace/scalars.py): a CPU TensorIterator op handed mixed
    dtypes copies each input not of the common dtype (and, in place, computes into a
    temporary when `self` is not of it); the dispatch mode sees none of them. Each count
    here is the CPU profiler's, and the ledger with them equals it."""
    with memledger.trace(measure=True) as led:
        a = torch.randn(1024).bfloat16()             # 2,048 B
        b = torch.randn(1024)                        # 4,096 B
        c = torch.rand(1024) > 0.5                   # 1,024 B (gt.Scalar: 8 + 4)
        x = a + b                                    # a as fp32: 4,096
        y = b.clone().add_(a)                        # 4,096
        z = a.clone().add_(b)                        # a as fp32 and the fp32 result: 8,192
        w = torch.where(c, a, b)                     # 4,096
        v = torch.addcmul(b, a, a)                   # a twice: 8,192
        u = a + torch.tensor(1.0)                    # a 0-dim tensor does not promote: 2
        del a, b, c, x, y, z, w, v, u
    (rec,) = led.extra["scalars"]
    assert rec["cbytes"] == [4096, 4096, 8192, 4096, 8192, 2]
    assert led.peak_with_scratch() == led.measured["peak_bytes"] == led.peak().bytes + 6140


def test_a_number_an_in_place_op_on_a_view_saves_lives_until_its_copyslices_ran():
    """Note [A number saved inside CopySlices]: `y[:, :4] /= 4.0` saves its divisor in a
    node hidden inside the CopySlices made for `y`, which the ledger could not read: 8 B
    under the allocator from the `div_` to its backward (nflows' spline couplings scale
    their parameters so: tests/clients/train_nflows.py; there 32 B). Now a storage of the
    ledger's, freed as the CopySlices ran: the peak, in that CopySlices' backward, 12,304 B
    (12,296 B before; the profiler of an untraced run, `tools/peak_live_diff.py`, 12,308 B
    with the backward `div`'s 4 B cast, which `trace`'s allocator pass adds)."""
    with memledger.trace() as led:
        w = torch.ones(64, 8, requires_grad=True)    # 2,048 B
        y = w.clone()                                # 2,048 B
        y[:, :4] /= 4.0                              # saves 4.0 (8 B), inside CopySlices
        h = y.exp()                                  # 2,048 B, saved
        h.sum().backward()
        del y, h
    s = led.storages
    saved = s[s["op"] == "(wrapped number)"]
    assert saved["bytes"].tolist() == [8]
    assert saved["category"].tolist() == ["activation"]
    made = s[s["op"] == "exp.default"]["created"].iloc[0]
    assert saved["created"].iloc[0] < made < saved["freed"].iloc[0]
    assert led.peak().bytes == 12_304


def test_a_saved_number_read_by_its_backward_is_not_held_idle():
    """Note [A saved number read by its node] (ledger/model.py): the divisor `x / 3.0` saves
    and the factor `h * 2.0` saves are read by their nodes' backward, which hands them to
    its ops as Python floats. "Held after last use" read them idle from their forward op to
    their free in backward (17 and 12 events before, 136 and 96 byte-events); now none, as
    any save unpacked in backward. A number whose graph the script drops without a
    backward (`side`, freed by `del` before it) stays idle as it reads: 7 events."""
    with memledger.trace() as led:
        x = torch.ones(1024, requires_grad=True)
        h = (x / 3.0).exp()                     # saves 3.0 (8 B); exp saves its output
        loss = (h * 2.0).sum()                  # saves 2.0 (8 B)
        side = (x / 5.0).sum()                  # saves 5.0 (8 B), never backpropagated
        for _ in range(3):
            torch.ones(4) + 0                   # ops between the forward and the backward
        del side
        loss.backward()
    s = led.storages
    saved = s[s["op"] == "(wrapped number)"].sort_values("created")
    assert saved["bytes"].tolist() == [8, 8, 8]
    idle = led.idle(top=None)
    by_sid = dict(zip(idle["sid"].tolist(), idle["idle_events"].tolist()))
    divisor, factor, dropped = saved["sid"].tolist()
    assert divisor not in by_sid and factor not in by_sid
    assert by_sid[dropped] == 7
    assert "(wrapped number)" in led.idle_offenders(None)["op"].tolist()   # the dropped one
