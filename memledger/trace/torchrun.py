"""`python -m memledger.trace.torchrun ARGS`: torch's own launcher (`torch.distributed.run`),
with its failure report left to memledger.

torchrun ends a failed job with a `ChildFailedError` traceback and an error table on stderr;
memledger reads each rank's status file and says which rank failed and why in one line
(memledger/trace/launch.py), so here the launcher runs through its Python API and a failure
is only an exit status; so is its stop on a signal (memledger passes a Ctrl-C on to it and
says once that it was interrupted). The ranks' own output (the script's prints and
tracebacks) is not touched: the workers write to the terminal directly.
"""

from __future__ import annotations

import gc
import logging
import sys
import tempfile


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    gc.enable()   # off for the imports (Note [Imports without the collector]); it runs no script

    args = get_args_parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    # the launcher makes a `torchelastic_*` folder in the system's temp dir for every job
    # and leaves it (one per `memledger trace --nproc`, `compare --nproc`, doctor of ranks:
    # 29 a run of the test suite); given one it makes its job's folder there, removed here
    with tempfile.TemporaryDirectory(prefix="memledger-torchrun-") as logs:
        if args.log_dir is None:
            args.log_dir = logs
        try:
            run(args)
        except ChildFailedError:
            return 1
        except SignalException as e:   # a Ctrl-C or SIGTERM passed on by memledger: it says so
            return 128 + int(e.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
