"""Note [Writes from other threads] (memledger/ledger/writer.py): a record written while a
flush is under way, from another thread or from a finaliser on the flushing thread, is
written once, and no record is written twice."""

from __future__ import annotations

import threading

import orjson

from memledger.ledger.writer import FileSink


def _lines(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_a_write_inside_a_flush_writes_every_record_once(tmp_path):
    """The CI failure's order: the file write of 4 records done, then (before the flush
    clears them) a free arrives; it used to flush the same 4 records again."""
    sink = FileSink(tmp_path / "a.ledger", flush_every=4)
    real_write = sink._fh.write

    def write_then_a_free_arrives(data):
        n = real_write(data)
        sink._fh.write = real_write          # once
        sink.write({"k": "free", "sid": 99})
        return n

    sink._fh.write = write_then_a_free_arrives
    for i in range(4):                       # the 4th write flushes
        sink.write({"k": "alloc", "sid": i})
    sink.close()
    assert [r["sid"] for r in _lines(tmp_path / "a.ledger")] == [0, 1, 2, 3, 99]


def test_two_threads_writing_lose_and_repeat_nothing(tmp_path):
    sink = FileSink(tmp_path / "b.ledger", flush_every=7)

    def writer(base: int) -> None:
        for i in range(2_000):
            sink.write({"k": "alloc", "sid": base + i})

    threads = [threading.Thread(target=writer, args=(b,)) for b in (0, 10_000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    sids = [r["sid"] for r in _lines(tmp_path / "b.ledger")]
    assert sorted(sids) == list(range(2_000)) + list(range(10_000, 12_000))


def test_a_forked_child_writes_nothing_into_the_parents_file(tmp_path):
    # Note [A forked child writes nothing]: DataLoader workers forked mid-trace flushed the
    # parent's unwritten records (header included) and their own into the parent's ledger
    import json
    import os

    path = tmp_path / "run.ledger"
    sink = FileSink(path, flush_every=4)
    sink.write({"k": "header", "n": 0})          # not yet on disk when the child forks
    pid = os.fork()
    if pid == 0:   # the child: what a DataLoader worker's copy of the collector would do
        try:
            for i in range(10):
                sink.write({"k": "child", "n": i})
            sink.flush()
            sink.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    for i in range(1, 6):
        sink.write({"k": "parent", "n": i})
    sink.close()
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert [(r["k"], r["n"]) for r in lines] == [("header", 0)] + [("parent", i)
                                                                   for i in range(1, 6)]
