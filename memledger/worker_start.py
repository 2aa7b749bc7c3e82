"""`python -m memledger.worker_start MODULE ARGS...`: `python -m MODULE ARGS...`, its imports
made with the garbage collector off. Every cold worker starts through here
(memledger/processes.py; a torchrun rank without a zygote, memledger/warm_rank.py).

# Note [Imports without the collector]
A worker imports torch and Dynamo before the script's first line: ~290,000 objects, none of
them garbage, over which the cyclic collector ran about eight full collections as they
were made: `import torch, torch._dynamo, memledger.trace.worker` took 5.2-5.9 s of CPU
with it on and 4.6-4.8 s with it off here (three runs each, alternated). So the collector
is off from here on, and comes back on, with the imports frozen, just before the script's
first line (Note [Objects from before the script] in memledger/trace/script.py): the
script runs with it as in a plain run. The zygote does the same around its imports
(memledger/zygote.py), and the one worker that runs no script, torch's launcher
(memledger/trace/torchrun.py), turns it back on after its own.
"""

from __future__ import annotations

import gc
import runpy
import sys


def main() -> None:
    gc.disable()
    module = sys.argv.pop(1)
    runpy.run_module(module, run_name="__main__", alter_sys=True)   # as `python -m` does


if __name__ == "__main__":
    main()
