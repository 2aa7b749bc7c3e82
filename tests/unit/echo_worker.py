"""A stand-in worker for tests/unit/test_processes.py, shaped like memledger's workers: a
`main(args) -> int` that `python -m` and a zygote's child both call."""

from __future__ import annotations

import json
import os
import random
import sys
import time


def main(args: list[str]) -> int:
    cmd = args[0]
    if cmd == "state":   # what a child starts from
        warm = "torch" in sys.modules   # imported before main: a zygote's child
        import gc

        # rich imported before main (by the zygote's imports, in a warm child)? Its objects
        # would be frozen there, out of gc.get_objects()'s sight: ask for the module
        console = "rich.console" in sys.modules

        import numpy
        import torch

        # One write per line: ranks share a pipe and run unbuffered (PYTHONUNBUFFERED), so
        # print's two writes (text, then newline) from two ranks could interleave mid-line
        sys.stdout.write(json.dumps({"warm": warm, "cwd": os.getcwd(), "path0": sys.path[0],
                          "var": os.environ.get("ECHO_VAR"), "argv": sys.argv[1:],
                          "rank": os.environ.get("RANK"), "pid": os.getpid(),
                          "torch": torch.rand(1).item(), "numpy": float(numpy.random.rand()),
                          "random": random.random(), "ppid": os.getppid(),
                          "stdout_tty": sys.stdout.isatty(), "frozen": gc.get_freeze_count(),
                          "console": console}) + "\n")
    elif cmd == "echo":
        print("out", *args[1:])
        print("err", *args[1:], file=sys.stderr)
    elif cmd == "reverse":
        print(sys.stdin.readline().strip()[::-1])
    elif cmd == "sleep":   # [PIDFILE]: say who sleeps, for a test that kills around it
        if len(args) > 1:
            with open(args[1], "w") as f:
                f.write(str(os.getpid()))
        time.sleep(60)
    elif cmd == "raise":
        raise ValueError("broke on purpose")
    elif cmd == "exit":
        sys.exit(int(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
