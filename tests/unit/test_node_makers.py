"""Note [The module that made a node] (trace/node_makers.py): ranges of autograd sequence
numbers noted at module calls, looked up by a node's number, pruned as passes end."""

from __future__ import annotations

import threading

import torch

from memledger.trace.node_makers import NodeMakers


def _node(x: torch.Tensor) -> int:
    """Make one node on this thread; its sequence number."""
    return (x * 2).grad_fn._sequence_nr()


def test_nodes_are_named_by_the_call_open_when_they_were_made():
    x = torch.ones(2, requires_grad=True)
    makers = NodeMakers(threading.get_ident())
    makers.note("a")
    a1, a2 = _node(x), _node(x)
    makers.note("a.b")
    makers.note("a.c")   # nothing made in a.b: its entry is replaced
    c = _node(x)
    makers.note(None)    # no call open
    none = _node(x)
    makers.note("a")
    makers.note("a")     # the same call again: no new entry
    a3 = _node(x)
    assert [makers.of(n) for n in (a1, a2, c, none, a3)] == ["a", "a", "a.c", None, "a"]
    assert len(makers) == 4
    assert makers.of(a1 - 1) is None       # made before anything was noted
    assert makers.of(2 ** 64 - 1) is None  # AccumulateGrad's number
    assert makers.of(-1) is None           # no node


def test_what_two_passes_ago_noted_goes():
    x = torch.ones(2, requires_grad=True)
    makers = NodeMakers(threading.get_ident())
    makers.note("first")
    first = _node(x)
    makers.note(None)
    makers.pass_ended()
    makers.note("second")
    second = _node(x)
    makers.note(None)
    makers.pass_ended()   # one pass later: the first forward's nodes still named
    assert (makers.of(first), makers.of(second)) == ("first", "second")
    makers.note("third")
    third = _node(x)
    makers.pass_ended()   # two passes later: gone; the entry open then stays
    assert (makers.of(first), makers.of(second), makers.of(third)) == (None, "second", "third")
    for _ in range(50):   # however many passes run, two passes' worth is kept
        makers.note("m")
        _node(x)
        makers.note(None)
        makers.pass_ended()
    assert len(makers) <= 5


def _on_a_fresh_thread(fn) -> None:
    t = threading.Thread(target=fn)
    t.start()
    t.join()


def test_another_thread_answers_only_for_numbers_it_cannot_have_made():
    """Counters are per thread: a CUDA device thread's starts at 0, and a node it made in
    backward may carry a number the tracing thread gave one of its own."""
    x = torch.ones(2, requires_grad=True)
    got: dict = {}

    noted, done = threading.Event(), threading.Event()

    def tracing() -> None:   # a fresh thread traces: its numbers start at 0
        got["makers"] = makers = NodeMakers(threading.get_ident())
        makers.note("a")
        got["nodes"] = [_node(x) for _ in range(3)]
        noted.set()
        done.wait()   # alive throughout, as a tracing thread is: no other takes its id

    tracer = threading.Thread(target=tracing)
    tracer.start()
    noted.wait(60)
    try:
        makers, nodes = got["makers"], got["nodes"]
        assert nodes == [0, 1, 2]

        def fresh() -> None:   # made no node yet: none of these can be its own
            got["fresh"] = [makers.of(n) for n in nodes]

        def made_two() -> None:   # made nodes 0 and 1 of its own
            _node(x), _node(x)
            got["two"] = [makers.of(n) for n in nodes]
            makers.note("b")   # noted on the tracing thread only

        _on_a_fresh_thread(fresh)
        _on_a_fresh_thread(made_two)
        assert got["fresh"] == ["a", "a", "a"]
        assert got["two"] == [None, None, "a"]
        for _ in range(3):
            _node(x)
        assert [makers.of(n) for n in nodes] == [None, None, None]   # this thread: past them
        assert len(makers) == 1
    finally:
        done.set()
        tracer.join()
