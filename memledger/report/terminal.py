"""`memledger show`: the ledger summary as Rich tables a person reads in ten seconds.

Top to bottom: where the peak is and whether the allocator agrees; what the peak is made
of (next to the peak of each phase and step); the largest tensors live there; what is saved
for backward, by module; memory held after its last use.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from memledger.ledger.fake_info import standin_site
from memledger.ledger.schema import CATEGORIES
from memledger.ledger.summary import Summary
from memledger.ledger.names import module_label
from memledger.report.names import Name
from memledger.units import count, format_bytes, format_percent

BAR_WIDTH = 12
SIDE_BY_SIDE_WIDTH = 80   # breakdown (51 columns) + gap (4) + phases (22)


def _mod(path: str) -> str:
    """A module path, whole: a narrow column folds it onto a second line rather than cut it."""
    return module_label(path)


def _op(op: str) -> str:
    """`addmm.default` -> `addmm`: the overload name only when it says something."""
    return op.removesuffix(".default")


def _plain(*cells: str) -> list[Text]:
    """Names from the ledger (modules, ops, parameters) are data, never Rich markup: a
    module named `[/x]` is printed as `[/x]`, not parsed as a closing tag."""
    return [Text(c) for c in cells]


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def _bar(part: int, whole: int) -> str:
    n = round(BAR_WIDTH * part / whole) if whole else 0
    return "█" * n


def _headline(s: Summary, source: str) -> list[Text]:
    pk = s.peak
    lines = [
        # an incomplete ledger's last step is cut short: its peak may lie in it
        Text(f"{source} · {s.device} · {count(s.steps_traced, 'step')} "
             + ("traced" if s.complete else "completed · INCOMPLETE (crashed or "
                "interrupted; the step in progress is shown up to where it stopped)"),
             style="dim"),
        Text.assemble(("Peak ", "bold"), (format_bytes(pk.bytes), "bold magenta"),
                      f" at step {pk.step} · {_phase(pk)} · {_op(pk.op) or '-'} in {_where(pk.module)}"
                      f" · event {pk.event}") if pk.bytes else
        Text("Nothing recorded: no tensor was made before the run stopped", style="bold"),
    ]
    return lines + summary_notes(s)


def summary_notes(s: Summary) -> list[Text]:
    """What the summary says beside its peak: the allocator's agreement, and each note that
    applies (the HTML report lists them too)."""
    pk, lines = s.peak, []
    if pk.bytes and pk.phase == "optimizer" and s.at_peak.get("temporary", 0):
        lines.append(_in_the_step_line(s))
    if s.fake is not None:
        lines.append(_fake_line(s))
    if s.compiled:
        lines.append(compiled_line(pk.bytes, s.measured.peak_bytes))
    elif s.measured.source != "none":
        lines.append(Text(f"Allocator peak {format_bytes(s.measured.peak_bytes)} "
                          f"({s.measured.source}): "
                          + agreement(s.measured.peak_bytes, pk.bytes)
                          + collective_clause(s.measured) + cublas_clause(s.measured)
                          + scratch_clause(s.measured),
                          style="dim"))
    m = s.measured
    if m.module_calls is not None and m.ledger_module_calls is not None and \
            m.module_calls != m.ledger_module_calls:   # Note [Two passes, one run?]
        lines.append(Text(f"Warning: the two runs of the script ran different code: "
                          f"{m.ledger_module_calls:,} module calls in the traced steps, "
                          f"{m.module_calls:,} in the allocator's run of them (an unseeded "
                          f"random choice? a branch on the data, or on the clock: a library "
                          f"that times its alternatives and keeps the fastest?), so their "
                          f"peaks do not compare; seed every generator the script and its "
                          f"model use, and fix a choice made by timing by its setting",
                          style="yellow"))
    # Note [Two passes, other random numbers?] (trace/rng_state.py): said where the peaks
    # differ (a generator drawn only by an import, rich's id counter, changes no byte)
    if m.generators_apart and m.peak_bytes != (m.ledger_with_scratch_bytes or pk.bytes):
        gens = m.generators_apart
        named = " and ".join(f"{g}'s" for g in gens)
        cures = {"torch": "torch.manual_seed", "numpy": "np.random.seed",
                 "random": "random.seed"}
        lines.append(Text(f"Warning: the two runs of the script drew other random numbers "
                          f"from {named} global generator{'s' if len(gens) > 1 else ''}, "
                          f"which it does not seed (a sampler, an augmentation, a random "
                          f"choice?): they may have run on other data, and their peaks do "
                          f"not compare; seed {'them' if len(gens) > 1 else 'it'} ("
                          + ", ".join(cures.get(g, g) for g in gens) + ")", style="yellow"))
    if s.script_checkpointed:   # Note [The script's own checkpoint]
        mods = s.script_checkpointed
        named = ", ".join(m or "(the model)" for m in mods[:3]) + \
            (f" and {len(mods) - 3} more" if len(mods) > 3 else "")
        lines.append(Text(f"The script checkpoints {named} itself (torch.utils.checkpoint): "
                          "checkpointing them, inside or around them, and offload inside them are "
                          "refused", style="dim"))
    if s.script_checkpointed_functions:   # Note [A policy checkpoint around a checkpointed
        fns = s.script_checkpointed_functions   # function] (trace/script_checkpoint.py)
        named = "; ".join(fns[:3]) + (f"; and {len(fns) - 3} more" if len(fns) > 3 else "")
        lines.append(Text(f"The script checkpoints the function{'s' if len(fns) > 1 else ''} "
                          f"{named} itself (torch.utils.checkpoint): checkpointing "
                          f"{'those modules' if len(fns) > 1 else 'that module'}, or one "
                          "around them, is refused", style="dim"))
    if s.saved_hooks:   # Note [The script's own saved-tensor hooks]
        lines.append(Text(f"Warning: the script runs its forward under saved-tensor hooks of "
                          f"its own ({s.saved_hooks}): what autograd saves under them is not "
                          f"seen as saved (their copies count as temporaries), so predictions "
                          f"of checkpoint and offload cannot move it", style="yellow"))
    if s.shared_input is not None:   # Note [Batches from other processes]
        si = s.shared_input
        lines.append(Text(f"{format_bytes(si.bytes)} of the input at the peak "
                          f"({si.storages} storage{'s' if si.storages > 1 else ''}) came from "
                          "other processes in shared memory (a DataLoader's workers): batches "
                          "fetched ahead wait until the step uses them, as many as the "
                          "workers' timing makes, so another run may hold more or fewer at "
                          "its peak; fewer workers or a lower `prefetch_factor` hold fewer",
                          style="dim"))
    if s.unread_saves is not None:   # a part of a graph no backward ran
        u = s.unread_saves
        at_peak = f", {format_bytes(u.at_peak_bytes)} of it live at the peak" \
            if u.at_peak_bytes else ""
        lines.append(Text(f"{format_bytes(u.bytes)} saved for backward ({u.storages} storage"
                          f"{'s' if u.storages != 1 else ''}) went unread{at_peak}: autograd "
                          "saved it for a part of a graph that no backward ran (ops under "
                          "gradients whose result was dropped or detached; for a whole "
                          "forward so, `memledger doctor` names its line)",
                          style="yellow" if u.at_peak_bytes else "dim"))
    if s.cycle_garbage is not None:
        lines.append(_garbage_line(s))
    if s.threads > 1:
        lines.append(_threads_line(s))
    return lines


def _garbage_line(s: Summary) -> Text:
    """Storages held by reference cycles (trace/gc_window.py): freed by Python's garbage
    collector, whose runs depend on the Python objects a run makes (the tracer makes its
    own, so the allocator's pass freed them at other times), or garbage still at the end."""
    g = s.cycle_garbage
    parts = []
    if g.storages:
        parts.append(f"Python's garbage collector freed {format_bytes(g.bytes)} ({g.storages} "
                     f"storage{'s' if g.storages != 1 else ''})")
    if g.at_end_storages:
        parts.append(f"{format_bytes(g.at_end_bytes)} ({g.at_end_storages} storage"
                     f"{'s' if g.at_end_storages != 1 else ''}) {'was' if parts else 'were'} "
                     "unreachable garbage at the end")
    at_peak = f", {format_bytes(g.at_peak_bytes)} of it at the peak" if g.at_peak_bytes else ""
    text = (" and ".join(parts) + at_peak + ": tensors held by reference cycles after "
            "their last use, until the collector runs. It runs when the count of Python "
            "objects says, which the tracer changes, so other runs free them at other times")
    differs = s.measured.source != "none" and s.measured.peak_bytes != (
        s.measured.ledger_with_scratch_bytes or s.peak.bytes)
    text += (": the allocator's run did, which may be why its peak differs" if differs
             else "") + "; `memledger doctor` names the cycles"
    return Text(("Warning: " + text) if differs else text,
                style="yellow" if differs or g.at_peak_bytes else "dim")


def _threads_line(s: Summary) -> Text:
    """Other Python threads ran: the dispatch mode sees only the traced thread, so what they
    made enters the ledger at its first use there; the CPU profiler, thread-local too,
    never counts their allocations (a `from_pretrained(dtype=torch.bfloat16)` converts the
    weights in its loading thread: the ledger then counts them and the allocator does not;
    tests/clients/train_resume.py). CUDA's counters see every thread."""
    n = s.threads - 1
    who = "a DataLoader's queues" if s.shared_input is not None else \
        "a DataLoader's queues, a loader of weights"
    text = (f"{n} other Python thread(s) ran while tracing ({who}): what they made is in the "
            "ledger from its first use in the traced thread")
    cpu = s.measured.source == "cpu-profiler"
    if cpu:
        text += ", and the CPU profiler counts only the traced thread's allocations"
    if _explained(s) or s.shared_input is not None:   # batches: the line above says why
        return Text(text, style="dim")
    if s.measured.source == "none":
        return Text(f"Warning: {text}: the peak is not measured", style="yellow")
    with_scratch = s.measured.ledger_with_scratch_bytes or s.peak.bytes
    if cpu and with_scratch > s.measured.peak_bytes:
        return Text(f"Warning: {text}: the {with_scratch - s.measured.peak_bytes:,} B the "
                    "ledger counts over the allocator may be theirs", style="yellow")
    return Text(f"Warning: {text}: they may hold what the ledger does not explain",
                style="yellow")


def _in_the_step_line(s: Summary) -> Text:
    """The peak is inside `optimizer.step()`: no activation policy lowers it, and where the
    step's own temporaries are the foreach path's (one per parameter at once: 2 x the
    parameters in bf16 for AdamW, docs/fake.md) the optimizer's `foreach` is what does."""
    return Text("T" + in_the_step_clause(s)[1:], style="yellow")


def in_the_step_clause(s: Summary) -> str:
    """`the peak is inside optimizer.step(): ...` (show's line, and plan's when no
    candidate fits)."""
    temp = s.at_peak["temporary"]
    text = (f"the peak is inside optimizer.step(): {format_bytes(temp)} of it are the "
            f"step's own temporaries, which no checkpoint or offload policy lowers")
    if s.peak.op.startswith("_foreach"):
        text += ("; they are its foreach path's, one per parameter at once, and "
                 "`foreach=False` in the optimizer makes them one parameter's at a time, "
                 "at the loop's speed")
    return text


def _explained(s: Summary) -> bool:
    """The allocator measured the peak and the ledger, with the kernel scratch measured op
    by op, accounts for it to within 4 KiB or 0.1 % (Python scalars and allocator
    rounding, never a tensor a thread kept). Without the scratch, TRL's DPO (a fused LM
    head whose `mm` takes 22 KiB inside, tests/clients/train_trl.py) read 7,232 B short,
    and the line on other threads warned that they may hold it, under the line that said
    the scratch explains every byte."""
    m = s.measured
    if m.source == "none" or not m.peak_bytes or s.compiled:
        return False
    ours = m.ledger_with_scratch_bytes or s.peak.bytes
    return abs(m.peak_bytes - ours) <= max(4096, m.peak_bytes // 1000)


def compiled_line(ledger_peak: int, compiled_peak: int) -> Text:
    """torch.compile: the ledger is the eager run (Dynamo compiles nothing under tracing)."""
    compiled = f"{format_bytes(compiled_peak)} ({compiled_peak:,} B)" if compiled_peak \
        else "not measured"
    return Text(f"torch.compile: this ledger is the EAGER run (peak {format_bytes(ledger_peak)},"
                f" {ledger_peak:,} B); the compiled run's allocator peak is {compiled}",
                style="yellow")


def _where(module: str) -> str:
    return "the script (outside any module)" if not module else module


def collective_clause(m) -> str:
    """The collectives' own buffers at the allocator's peak (gloo's, made on its threads):
    the part of the gap no ledger can hold (docs/distributed.md)."""
    coll = m.collective_at_peak_bytes or 0
    return f"; {coll:,} B of it are the collectives' own buffers, which no ledger sees" \
        if coll else ""


def cublas_clause(m) -> str:
    """On CUDA, the part of the gap that is cuBLAS's workspace (Note [The cuBLAS
    workspace] in trace/allocator.py)."""
    ws = m.cublas_workspace_bytes or 0
    text = f"; {format_bytes(ws)} of it is cuBLAS's workspace ({ws:,} B, measured), " \
        "which no tensor holds" if ws else ""
    if r := m.rounding_bytes:   # Note [Blocks larger than asked] in trace/allocator.py
        text += (f"; at least {format_bytes(r)} ({r:,} B) is the caching allocator's "
                 "rounding (blocks larger than what was asked)")
    return text


def scratch_clause(m) -> str:
    """What the kernels' own scratch (measured op by op) adds to the agreement: the
    dispatcher never sees it, the allocator does (Note [Kernel scratch])."""
    with_scratch = m.ledger_with_scratch_bytes
    if not with_scratch or m.peak_bytes <= 0:
        return ""
    rest = m.peak_bytes - with_scratch
    tail = "explains every byte" if rest == 0 else \
        agreement(m.peak_bytes, with_scratch).removeprefix("the ledger ")
    at = getattr(m, "ledger_with_scratch_peak", None)   # Note [The peak with the scratch,
    where = (f"; with it, the peak is at step {at.step} · {_phase(at)} · {_op(at.op) or '-'} "
             f"in {_where(at.module)}, not at the ledger's own above") if at else ""   # elsewhere]
    return (f"; with the scratch kernels took inside ops and the Python numbers ops wrapped "
            f"as tensors (measured op by op), it {tail}{where}")


def _phase(pk) -> str:
    """The peak's phase, said as a backward pass where one outside the step holds it (Note
    [A backward pass outside the step], ledger/model.py)."""
    if not getattr(pk, "backward_outside_step", None):
        return pk.phase
    where = "in setup" if pk.phase == "setup" else "between steps"
    return (f"{pk.phase} (a backward pass {where} that no optimizer step follows, not the "
            f"step's backward)")


def agreement(measured: int, ledger: int) -> str:
    """How the ledger's peak compares with the allocator's, in words that keep their sign:
    measured 4016, ledger 4000 -> 'the ledger explains all but 16 bytes (0.40%)';
    measured 4000, ledger 4016 -> 'the ledger counts 16 bytes (0.40%) more than the
    allocator saw'."""
    diff = measured - ledger
    if diff == 0:
        return "the ledger explains every byte"
    share = format_percent(abs(diff) / measured) if measured else "n/a"
    if diff > 0:
        return f"the ledger explains all but {count(diff, 'byte')} ({share})"
    return f"the ledger counts {count(-diff, 'byte')} ({share}) more than the allocator saw"


def _fake_line(s: Summary) -> Text:
    f = s.fake
    how = ("fake CUDA tensors" if f.kernels == "cuda" else
           "CPU kernels' sizes" + (f" as {f.target_device}" if f.target_device != "cpu" else ""))
    rounding = f", every size rounded to {f.rounding_bytes} B blocks" if f.rounding_bytes else ""
    text = (f"Fake run (FakeTensorMode, {how}{rounding}): no data, no allocator pass; "
            f"{f.flops / 1e9:,.1f} GFLOP traced")
    if f.real_storages:
        text += (f"\n  {f.real_storages} real tensors ({format_bytes(f.real_bytes)}): data read "
                 "for real, or literals' sources (real:cpu, in no category)")
    for si in f.standins[:8]:
        text += f"\n  stand-in {si.value} for {si.op} at {standin_site(si.file, si.line)}"
        text += f"  {si.code}" if si.code else ""
        text += f" ({si.why})" if si.why else ""
    if len(f.standins) > 8:
        text += f"\n  ... {len(f.standins) - 8} more (show --json)"
    for what in f.fake_aware:
        text += f"\n  {what}"
    return Text(text, style="yellow")


def _breakdown(s: Summary) -> Table:
    total = sum(s.at_peak.values())
    t = Table(title="At the peak", title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("category", no_wrap=True)
    t.add_column("bytes", justify="right", no_wrap=True)
    t.add_column("share", justify="right", no_wrap=True)
    t.add_column("", no_wrap=True)
    for c in CATEGORIES:
        b = s.at_peak.get(c, 0)
        if b:
            t.add_row(c, format_bytes(b), _pct(b, total), Text(_bar(b, total), style="cyan"))
    t.add_row("total", format_bytes(total), "", "", style="bold")
    return t


def _phases(s: Summary) -> Table:
    t = Table(title="Peak by phase / step", title_justify="left", show_edge=False,
              pad_edge=False, min_width=22)   # the title's width: never wrapped
    t.add_column("when", no_wrap=True)
    t.add_column("peak", justify="right", no_wrap=True)
    for name, b in s.by_phase_peak.items():
        t.add_row(name, format_bytes(b), style="bold" if name == s.peak.phase else None)
    for step, b in s.by_step_peak.items():
        t.add_row(f"step {step}", format_bytes(b), style="dim")
    return t


def _top_tensors(s: Summary, width: int = 120) -> Table:
    """The largest tensors live at the peak. Below SIDE_BY_SIDE_WIDTH columns (a 60-column
    terminal) six columns leave a name 5 characters: the module and the op or name share
    one column, as the idle table has it (`mm in lm_head`; a parameter's name holds its
    module), and shape and dtype another."""
    t = Table(title="Largest tensors live at the peak", title_justify="left", show_edge=False,
              pad_edge=False)
    t.add_column("bytes", justify="right", no_wrap=True)
    t.add_column("category", no_wrap=True)
    narrow = width < SIDE_BY_SIDE_WIDTH
    if narrow:
        t.add_column("what")
        t.add_column("shape, dtype")
    else:
        t.add_column("module")
        t.add_column("shape", no_wrap=True)
        t.add_column("dtype", no_wrap=True)
        t.add_column("made by / name")
    for r in s.top_tensors:
        if narrow:
            what = r.name or f"{_op(r.op)} in {_mod(r.module)}"
            t.add_row(format_bytes(r.bytes), r.category, Name(what),
                      Name(f"{r.shape} {r.dtype}"))
        else:
            t.add_row(format_bytes(r.bytes), r.category, Name(_mod(r.module)),
                      *_plain(r.shape, r.dtype), Name(_in_module(r.name, r.module)
                                                      or _op(r.op)))
    return t


def _in_module(name: str, module: str) -> str:
    """A name beside its module's column, without the module said twice (`gate_up_proj`
    beside `model.layers.0.mlp.experts`, which wrapped to three lines at 80 columns)."""
    if module and name.startswith(module + "."):
        return name[len(module) + 1:]
    return name


def _activations(s: Summary) -> Group:
    total = s.activations.saved_bytes
    title = Text(f"Saved for backward: {format_bytes(total)} live just before backward, by "
                 "the module that saved it (per block, then per module)", style="italic")
    t = Table(show_edge=False, pad_edge=False)
    t.add_column("module", overflow="fold")
    t.add_column("bytes", justify="right", no_wrap=True)
    t.add_column("share", justify="right", no_wrap=True)
    blocks = s.activations.by_block
    if len(blocks) < len(s.activations.by_module):   # a roll-up says something: show it
        for block, b in list(blocks.items())[:10]:
            t.add_row(Name(_block_label(block, blocks, s)), format_bytes(b), _pct(b, total),
                      style="bold")
        t.add_section()
    for mod, b in list(s.activations.by_module.items())[:10]:
        t.add_row(Name(_mod(mod)), format_bytes(b), _pct(b, total))
    if len(s.activations.by_module) > 10:
        t.add_row(f"... {len(s.activations.by_module) - 10} more modules", "", "",
                  style="dim")
    return Group(title, t)


def _block_label(block: str, blocks: dict, s: Summary) -> str:
    """`blocks.0.*` for a block and what is under it; `model.* (rest)` for a top-level
    module whose blocks have rows of their own (model.norm and model.embed_tokens beside
    model.layers.0.*: plain `model.*` read as if it held the layers too)."""
    label = _mod(block)
    if not block or not _has_children(block, s):
        return label
    if any(other.startswith(block + ".") for other in blocks):
        return label + ".* (rest)"
    return label + ".*"


def _has_children(block: str, s: Summary) -> bool:
    return any(m.startswith(block + ".") for m in s.activations.by_module)


def _idle(s: Summary) -> Table:
    t = Table(title="Held after last use (idle bytes × events; same tensor of each step "
                    "folded)", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("bytes", "×", "category", "what", "shape", "idle events"):
        t.add_column(col, justify="right" if col in ("bytes", "×", "idle events") else "left",
                     no_wrap=col != "what", overflow="fold")
    for r in s.idle[:8]:
        what = r.name or f"{_op(r.op)} in {_mod(r.module)}"
        t.add_row(format_bytes(r.bytes), str(r.count), r.category, Name(what), Text(r.shape),
                  f"{r.idle_events:,}")
    return t


def render_summary(s: Summary, source: str = "", width: int = 120) -> Group:
    """All of `show`'s tables, top to bottom; the breakdown and the per-phase peaks side by
    side where `width` holds both (about 80 columns of tables), else one above the other."""
    breakdown, phases = _breakdown(s), _phases(s)
    if width >= SIDE_BY_SIDE_WIDTH:
        side = Table.grid(padding=(0, 4))
        side.add_row(breakdown, phases)
        top: list = [side]
    else:
        top = [breakdown, Text(""), phases]
    parts: list = [*_headline(s, source), Text(""), *top, Text(""), _top_tensors(s, width),
                   Text(""),
                   _activations(s)]
    if s.idle:
        parts += [Text(""), _idle(s)]
    return Group(*parts)


def print_summary(s: Summary, console: Console, source: str = "") -> None:
    console.print(render_summary(s, source, width=console.width))
