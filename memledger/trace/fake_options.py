"""What `--fake` can and cannot be combined with, checked before any process starts (no
torch import: the parent process only validates flags)."""

from __future__ import annotations

from memledger.errors import EXIT_USAGE, ScriptError

FAKE_DEVICES = ("cpu", "cuda")


def check_fake_options(device: str | None, measure: bool | None) -> None:
    """Raise (exit 2, one line) for a `--fake` combination memledger cannot honour."""
    if measure:
        raise ScriptError("--fake has no allocator pass (a fake run allocates nothing, so there "
                          "is no allocator peak to measure); drop --measure, or trace without "
                          "--fake for the measured peak", exit_code=EXIT_USAGE)
    if device is not None and device.partition(":")[0] not in FAKE_DEVICES:
        raise ScriptError(f"--device {device!r}: a fake run targets cpu or cuda[:N]; "
                          "use --device cpu or --device cuda", exit_code=EXIT_USAGE)
    if device is not None and device.startswith("cuda:") and not device[5:].isdigit():
        raise ScriptError(f"--device {device!r} is not a CUDA device; write cuda or cuda:0",
                          exit_code=EXIT_USAGE)


def refuse_fake(verb: str) -> None:
    """`measure --fake`, `compare --fake`: those verbs run the script for real (exit 2)."""
    raise ScriptError(f"{verb} runs the script for real and measures it; a fake run has nothing "
                      "to measure: trace it with `memledger trace --fake` and use "
                      "`memledger predict` / `plan` on that ledger", exit_code=EXIT_USAGE)
