"""A distributed job the script starts by itself, which one memledger process cannot see.

# Note [Ranks the script starts itself]
A script can start its own ranks: Lightning's `Trainer(devices=2)` re-runs the script once
for each further rank (its subprocess launcher) and makes this process rank 0; its
`strategy="ddp_spawn"`, like `torch.multiprocessing.spawn`, trains in child processes only.
memledger runs inside this one process, so the other ranks trained untraced, unmeasured and
without the policy, and a ledger of rank 0 read as a single process's (no rank in its
header); under ddp_spawn this process trains nothing and memledger said "the script ran no
optimizer step ... count steps by forward passes", which sends the user the wrong way.

So a run is refused in one line (exit 2) at the first optimizer step in a process group of
more than one rank that memledger did not launch (`RANK` unset when the script started:
torchrun sets it under `--nproc`, FakeWorld under `--fake --world`), and at the end of a
script that set `MASTER_PORT` (Lightning's launchers set it in this process before they
start the others) and ran no module here (an evaluation script that makes a process group
of one for its library's sake runs its model: not refused). The stop is a BaseException, as StopTracing is:
Lightning's Trainer then kills the ranks it started. Under `--nproc N` Lightning joins
torchrun's ranks instead of starting its own (`tests/clients/train_lightning.py --devices 2`
traces to one ledger per rank), which is what the line says to do.
"""

from __future__ import annotations

import os


class OwnRanksStop(BaseException):
    """The script started ranks of its own: memledger stops it (Note above)."""


def _world() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def job_message(world: int) -> str:
    return (f"the script started a distributed job of its own ({world} ranks: this process "
            f"is one, the others run in processes it started, as Lightning's "
            f"Trainer(devices={world}) does), which memledger cannot see from one process; "
            f"run memledger with --nproc {world} (torchrun starts the ranks and Lightning "
            f"joins them) or train on one device")


SPAWN_MESSAGE = (
    "the script trained in processes it started itself (it set MASTER_PORT and stepped no "
    "optimizer in this process, as Lightning's strategy=\"ddp_spawn\" and "
    "torch.multiprocessing.spawn do), which memledger cannot see; run memledger with "
    "--nproc N and a strategy that joins torchrun's ranks (Lightning: strategy=\"ddp\"), or "
    "train on one device")


class OwnRanks:
    """Around one run of the script (memledger/trace/script.py, `run_and_classify`)."""

    def __init__(self) -> None:
        self.launched = "RANK" in os.environ     # by torchrun (--nproc) or FakeWorld
        self.port = os.environ.get("MASTER_PORT")
        self.steps = 0
        self.ran_module = False
        self._hooks: list = []

    def __enter__(self) -> "OwnRanks":
        if not self.launched:
            from torch.nn.modules.module import register_module_forward_pre_hook
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            self._hooks = [register_optimizer_step_pre_hook(self._on_step),
                           register_module_forward_pre_hook(self._on_forward)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _on_forward(self, *_) -> None:
        self.ran_module = True   # once is enough: the hook goes, no cost per call after
        if len(self._hooks) > 1:
            self._hooks.pop().remove()

    def _on_step(self, *_) -> None:
        self.steps += 1
        if self.steps == 1:
            world = _world()
            if world > 1:
                raise OwnRanksStop(job_message(world))

    def after(self) -> str | None:
        """The line for a script that ran to its end without a step here, having started
        a job elsewhere; None otherwise."""
        if self.launched or self.steps or self.ran_module:
            return None
        port = os.environ.get("MASTER_PORT")
        return SPAWN_MESSAGE if port is not None and port != self.port else None
