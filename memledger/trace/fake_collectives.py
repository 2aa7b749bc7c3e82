"""What a collective writes in a fake run, where the values it reads are known (Rule 28 of
Note [Fake runs], trace/fake.py).

# Note [A symmetric world]
A simulated rank (`--fake --world N`, Note [A simulated rank] in trace/fake_world.py) has
no peers: the fake process group moves nothing, and Rule 28 left every tensor a collective
writes unknown. Scripts gather what they know from shapes and then branch on it:
ring-attention-pytorch's `all_gather_variable_dim` all-gathers each rank's batch size
(`torch.tensor(t.shape[dim])`) and asks whether they are all equal; with the sizes unknown
`has_only_one_value(sizes)` took the stand-in False, `sizes.amax().item()` the stand-in 0,
and the rank padded and gathered batches of other shapes than the real run's (its fake
peak 124.1 KiB against the real rank's 198,540 B, tests/clients/train_ring_attention.py
`--ring --causal --no-ddp` on 2 ranks). soft-moe-pytorch's distributed experts gather
the token count and assert the counts agree: the fake run stopped there.

A torchrun job is one script run by every rank on shards of the same shapes (SPMD), so a
value a rank computes from shapes and literals is the same on every rank. A collective
whose inputs are known is therefore given the values it would write if every rank held
this rank's values (W ranks in its group, this rank r):

    all_gather (list, into a tensor, functional)  this rank's input, W times
    all_reduce  sum: W x v, avg / min / max / band / bor: v, product: v ** W,
                bxor: v if W is odd else 0 (premul_sum: unknown)
    reduce_scatter  the reduction of part r of this rank's input
    broadcast   this rank's value (the root's, in a symmetric world)
    wait_tensor the value it waits for (and `_wrap_tensor_autograd` the value it wraps)

It is wrong where the ranks' values differ in truth. Most such values come from data (a
count of non-padding tokens, an MoE router's tokens per expert), which a fake run does not
have: they are unknown already (Rule 3) and stay unknown through the collective. Only
values the rank knows (from shapes, literals, integer draws computed for real) are spread,
and of those a few differ across real ranks: a shard size that is one row shorter on the
last ranks of an uneven split, lengths drawn from a generator seeded by rank (the fake
run's own draws, said as such: Note [Draws a fake run makes for real]). There the
simulated rank is rank r of a world of N copies of itself: its own shapes are right, the
gathered ones are its own N times (a padded all-gather pads to this rank's size, not the
largest rank's). Every collective that
spread values is a stand-in record naming the line ("this rank's values on every rank"),
once per line, which `show` lists with the other stand-ins. all_to_all, gather, scatter,
reduce and point-to-point ops keep Rule 28: unknown.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

SYMMETRIC = "this rank's values on every rank (a symmetric world)"
# functional collectives' follow-ups: they hand on a result's values and assume nothing
HANDS_ON = frozenset({"wait_tensor", "_wrap_tensor_autograd"})

# c10d's ReduceOp.RedOpType numbers, and the functional collectives' names
_REDUCE_NAMES = {0: "sum", 1: "avg", 2: "product", 3: "min", 4: "max", 5: "band", 6: "bor",
                 7: "bxor", 8: "premul_sum"}

Known = Callable[[Any], "torch.Tensor | None"]


def symmetric_writes(func, args: tuple, kwargs: dict, out: Any,
                     known: Known) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(tensor the collective writes or returns, its values in a symmetric world) for each
    one whose values follow from known inputs (Note [A symmetric world]). `known(t)`: t's
    real values, or None; the caller runs this with the modes off."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return []
    a = {arg.name: (args[i] if i < len(args) else kwargs.get(arg.name))
         for i, arg in enumerate(schema.arguments)}
    name = schema.name.split("::", 1)[-1]
    try:
        return _writes(name, a, out, known)
    except Exception:   # an unfamiliar group or op: the values stay unknown (Rule 28)
        return []


def _writes(name: str, a: dict, out: Any, known: Known) -> list:
    pairs: list = []
    if name in HANDS_ON:   # a functional result, handed on
        t = a.get("tensor", a.get("input"))
        return [] if (v := known(t)) is None else [(t, v), (out, v)]
    if name in ("broadcast_", "broadcast"):   # c10d (a list) or functional (one tensor)
        ts = a.get("tensors") or [a.get("input")]
        dst = ts if name == "broadcast_" else [out]
        return [(d, v) for t, d in zip(ts, dst) if (v := known(t)) is not None]
    world, rank = _group(a)
    if name == "allgather_":           # output_tensors[i][j] = rank j's input i
        for outs, t in zip(a["output_tensors"], a["input_tensors"]):
            if (v := known(t)) is not None:
                pairs += [(o, v) for o in outs]
    elif name in ("_allgather_base_", "allgather_into_tensor_coalesced_",
                  "all_gather_into_tensor", "all_gather_into_tensor_out",
                  "all_gather_into_tensor_coalesced"):
        ins = _listed(a.get("input_tensor", a.get("input", a.get("inputs"))))
        outs = _outputs(a, out, ("output_tensor", "outputs"))
        pairs += [(o, torch.cat([v.reshape(-1)] * world)) for o, t in zip(outs, ins)
                  if (v := known(t)) is not None]
    elif name in ("allreduce_", "allreduce_coalesced_", "all_reduce", "all_reduce_",
                  "all_reduce_coalesced", "all_reduce_coalesced_"):
        ins = _listed(a.get("tensors", a.get("input", a.get("inputs"))))
        outs = ins if name.endswith("_") else _listed(out)
        op = _reduce_name(a["reduce_op"])
        pairs += [(o, r) for o, t in zip(outs, ins)
                  if (v := known(t)) is not None and (r := _reduced(v, op, world)) is not None]
    elif name in ("reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_",
                  "reduce_scatter_tensor", "reduce_scatter_tensor_out",
                  "reduce_scatter_tensor_coalesced"):
        op = _reduce_name(a["reduce_op"])
        if name == "reduce_scatter_":   # output_tensors[i] = reduce of input_tensors[i][r]
            parts = [known(ts[rank]) for ts in a["input_tensors"]]
            outs = a["output_tensors"]
        else:
            ins = _listed(a.get("input_tensor", a.get("input", a.get("inputs"))))
            parts = [None if (v := known(t)) is None else v.reshape(world, -1)[rank]
                     for t in ins]
            outs = _outputs(a, out, ("output_tensor", "outputs"))
        pairs += [(o, r) for o, v in zip(outs, parts)
                  if v is not None and (r := _reduced(v, op, world)) is not None]
    return [(o, v.reshape(o.shape).to(o.dtype)) for o, v in pairs
            if isinstance(o, torch.Tensor) and v.numel() == o.numel()]


def _listed(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _outputs(a: dict, out: Any, names: tuple[str, ...]) -> list:
    """The tensors a collective writes (its output arguments), or its fresh results."""
    for n in names + ("out",):
        if a.get(n) is not None:
            return _listed(a[n])
    return _listed(out)


def _group(a: dict) -> tuple[int, int]:
    """(size, this rank's place) of the group a collective runs on."""
    from torch._C._distributed_c10d import ProcessGroup, _resolve_process_group

    pg = a.get("process_group")
    group = ProcessGroup.unbox(pg) if pg is not None else _resolve_process_group(
        a["group_name"])
    size = a.get("group_size") or group.size()
    return int(size), int(group.rank())


def _reduce_name(op: Any) -> str:
    """'sum', 'max', ... from c10d's ReduceOp (a script object) or a functional op's name."""
    return op.lower() if isinstance(op, str) else _REDUCE_NAMES.get(int(op.op()), "?")


def _reduced(v: torch.Tensor, op: str, world: int) -> torch.Tensor | None:
    if op == "sum":
        return v * world
    if op == "product":
        return v ** world
    if op in ("avg", "min", "max", "band", "bor"):
        return v.clone()
    if op == "bxor":
        return v.clone() if world % 2 else torch.zeros_like(v)
    return None
