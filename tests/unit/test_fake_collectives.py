"""Note [A symmetric world] (memledger/trace/fake_collectives.py): what each collective
writes on a simulated rank when every rank holds this rank's values. Rank 2 of a fake
group of 4; each collective's writes are read from its real tensors (the fake group moves
nothing, so the inputs are as the script made them)."""

import pytest
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from memledger.trace.fake_collectives import symmetric_writes
from memledger.trace.fake_world import FakeWorld
from memledger.trace.sharding import is_collective


class _Spread(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, list]] = []

    def __torch_dispatch__(self, func, types, args, kwargs=None):
        out = func(*args, **(kwargs or {}))
        if is_collective(func):
            pairs = symmetric_writes(func, args, kwargs or {}, out, lambda t: t.clone())
            self.seen.append((func._schema.name, [v.tolist() for _, v in pairs]))
        return out


@pytest.mark.filterwarnings("ignore::FutureWarning")   # torch's names for the same ops
def test_each_collective_writes_this_ranks_values_as_every_ranks():
    import torch.distributed._functional_collectives as funcol

    with FakeWorld(world=4, rank=2), _Spread() as spread:   # rank 2 of 4
        dist.init_process_group("gloo")
        t = torch.tensor([1, 2])
        dist.all_gather([torch.empty_like(t) for _ in range(4)], t)
        dist.all_gather_into_tensor(torch.empty(8, dtype=torch.long), t)
        for op in ("SUM", "MAX", "PRODUCT", "BXOR"):
            dist.all_reduce(t.clone(), op=getattr(dist.ReduceOp, op))
        dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.long),
                                   torch.arange(8), op=dist.ReduceOp.SUM)
        dist.broadcast(torch.tensor([5]), src=0)
        funcol.wait_tensor(funcol.all_reduce(torch.tensor([3]), "sum", dist.group.WORLD))
        funcol.wait_tensor(funcol.all_gather_tensor(torch.tensor([7]), 0, dist.group.WORLD))
        dist.all_to_all_single(torch.empty(4, dtype=torch.long), torch.arange(4))
    got = [(n.split("::")[1], v) for n, v in spread.seen]
    assert got[:8] == [
        ("allgather_", [[1, 2]] * 4),
        ("_allgather_base_", [[1, 2, 1, 2, 1, 2, 1, 2]]),
        ("allreduce_", [[4, 8]]), ("allreduce_", [[1, 2]]), ("allreduce_", [[1, 16]]),
        ("allreduce_", [[0, 0]]),
        ("_reduce_scatter_base_", [[16, 20]]),     # part 2 of arange(8), x 4 ranks
        ("broadcast_", [[5]])]
    # a functional result (3 x 4 ranks) handed on as it is (here its tensor's own values:
    # the fake group wrote nothing; in a fake run, the shadow all_reduce's result got)
    assert got[8:11] == [("all_reduce", [[12]]), ("_wrap_tensor_autograd", [[3], [3]]),
                         ("wait_tensor", [[3], [3]])]
    assert ("all_gather_into_tensor", [[7, 7, 7, 7]]) in got
    assert ("alltoall_base_", []) in got               # Rule 28: unknown
