"""MONAI segmentation (tests/clients/train_monai.py): MetaTensor batches from MONAI's
transforms, 3-D / 2-D convolutions with instance norm and transposed convolutions, and
DynUNet, whose recursive `skip_layers` runs blocks named elsewhere (`input_block`,
`downsamples.i`, `upsamples.i`) and keeps its deep-supervision heads in a list every skip
layer shares. Skipped without monai."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from tests.clients.harness import HERE, _call, imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("monai")
_imported = imported_first("monai")

DYNUNET = ["--mode", "dynunet", "--dims", "2", "--size", "16", "--levels", "3"]


def test_dynunet_skip_layers_checkpoint_and_offload_exact():
    """DynUNet under `checkpoint:skip_layers` and `offload:skip_layers` (2-D, 16 x 16, three
    levels: one head).

    - The region's last op is the outermost up block's in-place LeakyReLU, saved by a module
      named `upsamples.1.conv_block.lrelu` (outside `skip_layers` by name): its save on the
      call's last event was read as no call's, so the re-run came after the node that
      unpacks it. Before: predicted 238,016 B, measured 245,440 (Note [A boundary save by a
      shared module], replay/calls.py).
    - The head is a MetaTensor kept in `self.heads[0]`, a list attribute: now a `stash`
      record, so the re-run's head replaces the forward's; without it, 245,952 B
      predicted (Note [Tensors a call keeps on its module]).
    - The stash's graph walk recorded an event per save it read, each a use after forward:
      with the head stashed, offload was predicted 203,612 B, measured 191,424 (Note [A
      graph read unseen], trace/collector.py)."""
    run = run_client("train_monai.py", DYNUNET, ["checkpoint:skip_layers",
                                                 "offload:skip_layers"], steps=2)
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    # the skip layer that writes the head, and the model, which holds the same list
    assert {r["mod"] for r in run.ledger.extra["stash"]} == {"skip_layers.next_layer", ""}
    st = run.ledger.storages
    # the batch: (1, 1, 16, 16) fp32 image and label, MetaTensors from the DataLoader
    assert set(st.loc[st["category"] == "input", "bytes"]) == {16 * 16 * 4}
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)
    assert run.policies["checkpoint:skip_layers"].measured == 245_440
    assert run.policies["offload:skip_layers"].measured == 191_424


def test_fake_run_refuses_metatensor_in_one_line():
    """A fake run's tensors are FakeTensors, which `as_subclass(MetaTensor)` cannot turn
    into MetaTensors (every MONAI transform makes one): the script's traceback, wrapped in
    MONAI's "applying transform ...", was printed and the run failed (exit 3). Now one line,
    exit 2, read through the wrapping error. (With plain tensors, `set_track_meta(False)`,
    `--no-meta`, the fake run is the real one to the byte: docs/accuracy.md.)"""
    from memledger.errors import EXIT_USAGE
    from memledger.trace import worker as trace_worker

    with tempfile.TemporaryDirectory() as tmp:
        status = Path(tmp) / "status.json"
        code = _call(trace_worker.main, ["ledger", "--fake", "--device", "cpu", "--out",
                                         str(Path(tmp) / "f.ledger"), "--status", str(status),
                                         "--steps", "1", str(HERE / "train_monai.py"), "--",
                                         *DYNUNET])
        reason = json.loads(status.read_text())["reason"]
    assert code == EXIT_USAGE, reason
    assert reason.startswith("memledger: cannot run fake at tests/clients/train_monai.py:"), reason
    assert "makes tensors of its own subclass MetaTensor (`as_subclass`)" in reason, reason
