"""What a fake ledger says about itself (header `fake: true`, Note [Fake runs] in
memledger/trace/fake.py): its target, how sizes were made, and the stand-ins it used.
No torch here."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class StandIn(BaseModel):
    """A data-dependent value the fake run replaced (Note [Fake runs], Rule 3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    file: str = Field(description="the file of the line that read the value: the script's, "
                      "or a library's where a library read it (torch's own functions name "
                      "their caller)")
    line: int
    code: str = Field(description="that line's source text")
    op: str = Field(description="aten._local_scalar_dense (.item() etc.) or an upper-bound op")
    value: str = Field(description="the stand-in used, as text")
    why: str = Field(default="", description="why this value, where it is not Rule 3's "
                     "plain one (Rule 34: a check a real run passes)")


def standin_site(file: str, line: int) -> str:
    """`train.py:12`, or `torchmdnet/models/utils.py:306` for a library's file (its path
    under site-packages: a library's `utils.py` alone names no one file), as `show` and
    `check` print where a stand-in was read (Note [The frame a stand-in names],
    trace/fake.py)."""
    parts = file.replace("\\", "/").split("/")
    at = max((i for i, p in enumerate(parts) if p in ("site-packages", "dist-packages")),
             default=-1)
    return f"{'/'.join(parts[at + 1:]) if at >= 0 else parts[-1]}:{line}"


class FakeRun(BaseModel):
    """`show --json` key `fake`: present only for fake ledgers."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    target_device: str
    kernels: str = Field(description="'cuda': fake CUDA tensors; 'cpu': CPU kernels' sizes")
    rounding_bytes: int = Field(description="allocator block every size was rounded to (0: none)")
    flops: int = Field(description="FLOPs counted in the traced steps (torch's flop formulas)")
    real_storages: int = Field(description="real (non-fake) storages: read from files, made "
                               "before the run, or literals' sources (device real:cpu)")
    real_bytes: int = Field(description="their bytes")
    standins: list[StandIn]
    fake_aware: list[str] = Field(default_factory=list, description="libraries the script "
                                  "imported that branch on FakeTensor, and what it changes "
                                  "(Note [Fake runs], Rule 7)")


def fake_info(led) -> FakeRun | None:
    """The fake-run facts of a Ledger, or None for a real ledger."""
    h = led.header
    if not h.get("fake"):
        return None
    real = led.storages.index.isin([r["sid"] for r in led.extra.get("real", [])])
    flops = sum(int(r.get("n", 0)) for r in led.extra.get("flops", []))
    return FakeRun(
        target_device=led.device if str(h.get("target_device", "")).startswith("(") or
        not h.get("target_device") else str(h["target_device"]),
        kernels=str(h.get("fake_kernels", "cpu")),
        rounding_bytes=int(h.get("rounding_bytes", 0)) if led.device.startswith("cuda") else 0,
        flops=flops, real_storages=int(real.sum()), real_bytes=int(led.storages["bytes"][real].sum()),
        standins=[StandIn(file=str(r.get("file", "")), line=int(r.get("line", 0)),
                          code=str(r.get("code", "")), op=str(r.get("op", "")),
                          value=str(r.get("value", "")), why=str(r.get("why", "")))
                  for r in led.extra.get("standin", [])],
        fake_aware=[str(r.get("what", "")) for r in led.extra.get("fake_aware", [])],
    )
