"""`--fake --world N [--rank r]`: one rank of an N-rank job, simulated in one process.

# Note [A simulated rank]
torch ships a fake process group (`torch.testing._internal.distributed.fake_pg`): every
collective returns at once and moves no data, but each rank's *shapes* are those of the
real job. Above `FakeTensorMode` (memledger/trace/fake.py) the script then builds, shards
and trains its model exactly as rank r of N would, with no memory and no peers, so an
FSDP2 rank of 64 or 1024 is one process on a laptop. The ledger is an ordinary fake ledger
whose header says `rank`, `world_size` and `"simulated": true`.

Three of torch's own calls need help, so while the rank runs:

1. `torch.distributed.init_process_group(...)` is a no-op once this module has made the
   fake default group (the script's own call, `gloo` or `nccl`, would wait for N real
   peers). The original is put back afterwards.
2. `init_device_mesh(...)` runs outside FakeTensorMode: a mesh is a small integer tensor
   whose values (which rank sits where) DeviceMesh reads with `nonzero()` and `tolist()`;
   fake values would give every rank every coordinate. FSDP2 builds its default mesh
   through `torch.distributed.fsdp._fully_shard._fsdp_init.init_device_mesh`, so both
   names are wrapped, and put back afterwards.
3. `is_initialized()`, `get_world_size()` and `get_rank()` are watched: a script that asks
   for the group's size or rank before it would make it has joined it (Note [A script that
   asks before it joins]); whether it exists is answered as the real rank would (Note
   [Asked whether the group exists]).

Worked example (examples/train_fsdp.py, V=255, C=64, 2 blocks, fp32): simulated rank 0 of
2 holds 237,056 B of sharded parameters and peaks at 2,235,688 B after 1 step; the real
2-rank run's rank 0 (gloo, CPU) holds the same 237,056 B and peaks at 2,235,712 B (the
24 B are Python scalars the fake run keeps as real constants).

The fake group moves no data: what a collective writes is known only where its inputs are,
and then is what every rank holding this rank's values would give (Note [A symmetric
world], trace/fake_collectives.py).

DDP is not simulated: its reducer reads gradient values to fill its buckets and checks
parameter shapes across ranks with real collectives. A DDP rank holds what one process
holds plus its buckets whatever N is, so `trace --nproc 1` measures it (Note in
docs/distributed.md).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from memledger.errors import EXIT_USAGE, ScriptError

MAX_WORLD = 1024
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # memledger/


class FakeWorld:
    """Example usage::

        with FakeWorld(world=64, rank=0):
            run_script("train_fsdp.py", [])     # under a FakeCollector
    """

    def __init__(self, world: int, rank: int = 0) -> None:
        if not 1 <= world <= MAX_WORLD:
            raise ScriptError(f"--world {world}: simulate 1 to {MAX_WORLD} ranks",
                              exit_code=EXIT_USAGE)
        if not 0 <= rank < world:
            raise ScriptError(f"--rank {rank} is not a rank of --world {world}; use 0 to "
                              f"{world - 1}", exit_code=EXIT_USAGE)
        self.world, self.rank = world, rank
        # the script called init_process_group or init_device_mesh, or asked for the group
        # (Note [A script that asks before it joins])
        self.joined = False
        self._saved: list[tuple[Any, str, Any]] = []
        self._env: dict[str, str | None] = {}

    def header(self) -> dict[str, Any]:
        return {"rank": self.rank, "world_size": self.world, "simulated": True}

    def __enter__(self) -> "FakeWorld":
        import torch.distributed as dist
        import torch.distributed.device_mesh as device_mesh
        import torch.distributed.fsdp._fully_shard._fsdp_init as fsdp_init
        import torch.testing._internal.distributed.fake_pg as fake_pg  # registers "fake"
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        env = {"RANK": str(self.rank), "LOCAL_RANK": str(self.rank),
               "WORLD_SIZE": str(self.world), "LOCAL_WORLD_SIZE": str(self.world),
               "MASTER_ADDR": "localhost", "MASTER_PORT": "0"}
        self._env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=self.rank,
                                world_size=self.world)
        real_mesh = device_mesh.init_device_mesh

        def init_device_mesh(*args, **kwargs):   # rule 2
            self.joined = True
            with unset_fake_temporarily():
                return real_mesh(*args, **kwargs)

        def init_process_group(*args, **kwargs):  # rule 1
            self.joined = True
            if not dist.is_initialized():
                return self._saved[0][2](*args, **kwargs)
            return None

        patches = [(dist, "init_process_group", init_process_group),
                   (dist.distributed_c10d, "init_process_group", init_process_group),
                   (device_mesh, "init_device_mesh", init_device_mesh),
                   (fsdp_init, "init_device_mesh", init_device_mesh)]
        # rule 3, Note [A script that asks before it joins]
        for name in ("is_initialized", "get_world_size", "get_rank"):
            for owner in (dist, dist.distributed_c10d):
                patches.append((owner, name, self._asked(getattr(owner, name))))
        for owner, name, new in patches:
            self._saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, new)
        return self

    # Note [A script that asks before it joins]
    # `if not dist.is_initialized(): dist.init_process_group("gloo")` is how many scripts
    # (and launchers) start: under `--world` the fake default group exists already, so the
    # script never calls init_process_group, and the run was refused as "never called
    # init_process_group ... one process at any world size" although it was rank r of N
    # throughout: fairscale's OSS read the world size to shard the optimizer state and
    # ShardedDataParallel reduced each gradient on the group (tests/clients/
    # train_fairscale.py: simulated rank 0 of 2 equals the real rank 0, 325,696 B, in every
    # category). So a script (or a library it calls) that asks the group's size or its rank
    # has joined it too, and one that asks whether it exists is told False until it
    # joins, so that it calls init_process_group as the real rank does (the Note below);
    # memledger's own questions (the ledger header's rank, the doctor's replicas) do not
    # count.
    #
    # Note [Asked whether the group exists]
    # `is_initialized()` is answered as the real rank would answer it: False until the script
    # (or a library it calls) has called `init_process_group` or `init_device_mesh`, True
    # from then on. Answered True from the start (the fake group is made before the script
    # runs), soft-moe-pytorch's `Experts`, which asks when it is built and takes its
    # distributed path if so, gathered token counts and split its experts across two ranks
    # in a script that never joins a group: a real `torchrun --nproc_per_node 2` of it runs
    # two single processes (tests/clients/train_moe.py --mode soft); now `--world` refuses
    # it as not distributed, as it refuses any script that never joins. The pattern above
    # (`if not dist.is_initialized(): dist.init_process_group("gloo")`) gets False, calls
    # init_process_group, which joins it (rule 1). Asking the size or the rank still joins.
    def _asked(self, fn):
        initialized = fn.__name__ == "is_initialized"

        def asked(*args, **kwargs):
            if not sys._getframe(1).f_code.co_filename.startswith(_OURS):
                if initialized and not self.joined:   # Note [Asked whether the group exists]
                    return False
                self.joined = True
            return fn(*args, **kwargs)
        return functools.wraps(fn)(asked)

    def __exit__(self, *exc) -> None:
        import torch.distributed as dist

        for owner, name, old in reversed(self._saved):
            setattr(owner, name, old)
        self._saved = []
        if dist.is_initialized():
            dist.destroy_process_group()
        for k, v in self._env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


NOT_DISTRIBUTED = (
    "memledger: --world simulates one rank of a distributed job, but the script never called "
    "init_process_group or init_device_mesh: it is one process at any world size; trace it "
    "without --world")

DDP_MESSAGE = (
    "--fake --world cannot simulate DistributedDataParallel (its reducer reads gradient "
    "values and checks shapes with real collectives); a plain DDP rank holds what one "
    "process holds plus its gradient buckets at any world size, so trace real ranks: "
    "memledger trace --nproc 2 {script} (ZeroRedundancyOptimizer's shard of the optimizer "
    "state depends on the world size: trace with as many ranks as you can)")


def ddp_refusal(err: BaseException, script: str):
    """A failure inside DDP under a simulated world: exit 2 with the way to model DDP
    (None: not DDP's)."""
    from memledger.trace.script import ScriptOutcome

    tb = err.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        if name.endswith("torch/nn/parallel/distributed.py"):
            return ScriptOutcome(EXIT_USAGE, DDP_MESSAGE.format(script=script), err)
        tb = tb.tb_next
    return None
