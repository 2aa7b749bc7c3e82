"""Policies are data: what to do with which modules' saved activations.

A policy string is `kind:selector[:option...]`, parts joined by `+`:

    none                                    the baseline: nothing changes
    checkpoint:blocks.*                     non-reentrant activation checkpointing per block
    selective:@Block:save=mm,addmm          selective checkpointing: keep those ops' outputs
    offload:blocks.[0-1]:min=64KiB          saved activations >= 64 KiB leave the device
    checkpoint:blocks.[0-1]+offload:blocks.[2-3]

Selectors are globs over module paths as `model.named_modules()` names them: `*` matches
within one path segment (`blocks.*` is `blocks.0`, `blocks.1`, ..., not `blocks.0.attn`),
`**` matches across segments, `?` one character, `[0-3]` a character class. `@Block`
selects every module whose class is named `Block`.

No torch here: selectors resolve against a list of (path, class name) pairs, taken from a
ledger's scopes (predict) or from `model.named_modules()` (measure).
"""

from __future__ import annotations

import re
import tomllib
from enum import Enum
from pathlib import Path
from typing import Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memledger.errors import MatchesNoModule, PolicyError, UnitError
from memledger.ledger.names import plain_name
from memledger.units import parse_bytes


class PolicyKind(str, Enum):
    """What a policy part does to the selected modules."""

    NONE = "none"              #: nothing: the baseline
    CHECKPOINT = "checkpoint"  #: drop activations saved inside; recompute before backward
    SELECTIVE = "selective"    #: like checkpoint, but keep the outputs of the `save` ops
    OFFLOAD = "offload"        #: saved activations leave the device at pack, return at unpack


# Op kinds whose outputs selective checkpointing keeps by default: the expensive ones.
DEFAULT_SAVE_OPS: tuple[str, ...] = (
    "mm", "bmm", "addmm", "baddbmm", "convolution", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
)


def is_op_kind(name: str) -> bool:
    """An aten op kind a save list can name (`mm`, `_scaled_dot_product_flash_attention`);
    not the ledger's pseudo-ops such as `(wrapped number)`, which no op returns."""
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None


class PolicyPart(BaseModel):
    """One `kind:selector[:options]` part of a policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: PolicyKind = Field(description="what to do")
    selector: str = Field("", description="glob over module paths, or @ClassName")
    save: tuple[str, ...] = Field((), description="selective: op kinds whose outputs are kept")
    min_bytes: int = Field(0, ge=0, description="offload: only saved storages of >= this size")

    def text(self) -> str:
        if self.kind is PolicyKind.NONE:
            return "none"
        s = f"{self.kind.value}:{self.selector}"
        if self.kind is PolicyKind.SELECTIVE and self.save != DEFAULT_SAVE_OPS:
            s += ":save=" + ",".join(self.save)
        if self.min_bytes:
            s += f":min={_exact_size(self.min_bytes)}"
        return s

    def save_ops(self) -> tuple[str, ...]:
        return self.save or DEFAULT_SAVE_OPS


def _exact_size(n: int) -> str:
    """A byte count in the largest binary unit that holds it exactly, as people write it:
    65536 -> '64KiB', 1048576 -> '1MiB', 500 -> '500B' (a policy echoed back reads as
    written, and parses to the same bytes)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


class Policy(BaseModel):
    """A whole policy: parts applied together. `Policy.parse("checkpoint:blocks.*")`.

    Known limitations: regions may not nest (a selected module inside another selected one),
    neither within a part nor across parts.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    parts: tuple[PolicyPart, ...] = Field((), description="empty for the baseline")
    name: str = Field("", description="a label (from a TOML file); defaults to the text")

    @classmethod
    def parse(cls, text: str) -> "Policy":
        return parse_policy(text)

    def text(self) -> str:
        return "+".join(p.text() for p in self.parts) or "none"

    def __str__(self) -> str:
        return self.name or self.text()

    @property
    def is_baseline(self) -> bool:
        return not self.parts


class Region(BaseModel):
    """A selected module and what the policy does to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    cls: str = ""
    part: PolicyPart


# ---- parsing ------------------------------------------------------------------------------
_KINDS = ", ".join(k.value for k in PolicyKind)


def parse_policy(text: str) -> Policy:
    """Read a policy string; raise PolicyError (exit 2) with what to write instead."""
    if not isinstance(text, str) or not text.strip():
        raise PolicyError("empty policy; write e.g. 'checkpoint:blocks.*' or 'none'")
    parts = []
    for raw in text.strip().split("+"):
        raw = raw.strip()
        if not raw:
            raise PolicyError(f"policy {text!r} has an empty part around '+'; "
                              "write e.g. 'checkpoint:blocks.[0-1]+offload:blocks.[2-3]'")
        part = _parse_part(raw, text)
        if part.kind is not PolicyKind.NONE:
            parts.append(part)
        elif len(text.split("+")) > 1:
            raise PolicyError(f"policy {text!r}: 'none' cannot be combined with other parts")
    return Policy(parts=tuple(parts))


def _parse_part(raw: str, whole: str) -> PolicyPart:
    kind_s, _, rest = raw.partition(":")
    try:
        kind = PolicyKind(kind_s.strip().lower())
    except ValueError:
        raise PolicyError(f"unknown policy kind {kind_s!r} in {whole!r}; kinds are {_KINDS}") \
            from None
    if kind is PolicyKind.NONE:
        if rest.strip():
            raise PolicyError(f"policy {whole!r}: 'none' takes no selector")
        return PolicyPart(kind=kind)
    selector, *options = [s.strip() for s in rest.split(":")] if rest else [""]
    if not selector:
        raise PolicyError(f"policy part {raw!r} has no selector; write e.g. "
                          f"'{kind.value}:blocks.*' or '{kind.value}:@Block'")
    _check_selector(selector, whole)
    fields: dict = {"kind": kind, "selector": selector}
    for opt in options:
        key, eq, value = opt.partition("=")
        key = key.strip().lower()
        if not eq or not value.strip():
            raise PolicyError(f"option {opt!r} in {whole!r} is not key=value; "
                              "write e.g. 'save=mm,addmm' or 'min=1MiB'")
        if key == "save" and kind is PolicyKind.SELECTIVE:
            ops = tuple(o.strip() for o in value.split(",") if o.strip())
            bad = [o for o in ops if not is_op_kind(o)]
            if bad or not ops:
                raise PolicyError(f"save={value!r} in {whole!r}: op kinds are aten names like "
                                  "mm,addmm,bmm,convolution")
            fields["save"] = ops
        elif key == "min" and kind is PolicyKind.OFFLOAD:
            try:
                fields["min_bytes"] = parse_bytes(value.strip())
            except UnitError as e:
                raise PolicyError(f"min={value!r} in {whole!r}: {str(e).removeprefix('memledger: ')}") \
                    from None
        else:
            allowed = {"selective": "save=", "offload": "min="}.get(kind.value, "no options")
            raise PolicyError(f"option {key!r} does not apply to {kind.value} in {whole!r} "
                              f"({kind.value} takes {allowed})")
    if kind is PolicyKind.SELECTIVE and "save" not in fields:
        fields["save"] = DEFAULT_SAVE_OPS
    return PolicyPart(**fields)


MAX_SELECTOR_CHARS = 200      # a module path glob; 'blocks.*.attn' is 13
MAX_SELECTOR_WILDCARDS = 16   # runs of '*' and each '?'


# Note [Paths a ModuleDict names]
# A module's path segment is its attribute name or, in an `nn.ModuleDict`, its key: any
# string without a dot. se3-transformer-pytorch keys each pairwise convolution by its
# degrees, `kernel_unary["(0,1)"]`, so `show` names `se3.conv_in.kernel_unary.(0,1).rp`.
# A selector takes the characters of such keys that mean nothing to the policy grammar:
# `(`, `)` and `,` (a part ends at `+`, an option starts at `:`, so `selective:x.(0,1):
# save=mm,bmm` still reads its options). Braces and the like stay refused.
def _check_selector(selector: str, whole: str) -> None:
    if selector.startswith("@"):
        if not re.fullmatch(r"@[A-Za-z_][A-Za-z0-9_]*", selector):
            raise PolicyError(f"class selector {selector!r} in {whole!r} is not a class name; "
                              "write e.g. '@Block'")
        return
    if selector.count("[") != selector.count("]") or not re.fullmatch(
            r"[A-Za-z0-9_.*?\[\]\-!(),]+", selector):   # Note [Paths a ModuleDict names]
        raise PolicyError(f"selector {selector!r} in {whole!r} is not a module-path glob; "
                          "write e.g. 'blocks.*', 'blocks.[0-3]' or '@Block'")
    # A regex of many `*` backtracks for minutes on a near miss: module paths need few.
    stars = len(re.findall(r"\*+|\?", selector))
    if len(selector) > MAX_SELECTOR_CHARS or stars > MAX_SELECTOR_WILDCARDS:
        raise PolicyError(f"selector {selector[:40]!r}... in the policy has {len(selector)} "
                          f"characters and {stars} wildcards; at most {MAX_SELECTOR_CHARS} and "
                          f"{MAX_SELECTOR_WILDCARDS}: write e.g. 'blocks.*' or '@Block'")
    try:
        glob_regex(selector)
    except (re.error, ValueError) as e:
        raise PolicyError(f"selector {selector!r} in {whole!r} is not a valid glob ({e}); "
                          "write a range low to high, e.g. 'blocks.[0-3]'") from None


def glob_regex(selector: str) -> re.Pattern:
    """`*` within a segment, `**` across segments, `?` one char, `[..]` a class."""
    out, i = [], 0
    while i < len(selector):
        c = selector[i]
        if selector.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append(r"[^.]*")
        elif c == "?":
            out.append(r"[^.]")
        elif c == "[":
            j = selector.index("]", i)
            body = selector[i + 1:j]
            out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
            i = j + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


# ---- resolution against a model's modules ---------------------------------------------------
def resolve(policy: Policy, modules: Iterable[tuple[str, str]],
            known: str = "the model's modules are", after: str = "",
            others: Iterable[str] = (), uncalled: Iterable[str] = (),
            containers: dict[str, str] | None = None,
            idle: Iterable[str] = (), moved: bool = False,
            classes: dict[str, str] | None = None,
            own_call: Iterable[str] = (), was: str = "",
            aliases: dict[str, str] | None = None,
            methods: dict[str, str] | None = None,
            made: dict[str, str] | None = None) -> list[Region]:
    """The regions a policy selects among (path, class name) pairs, in model order.

    Raises PolicyError when a selector matches nothing (listing the module names, then
    `after`; or, where it names a top-level module the script calls beside the model, one
    of `others`, saying so; or, where it names modules that hold parameters but never ran
    as module calls, one of `uncalled`, saying why), when two selected modules nest, or
    when two parts select the same module. `containers` (path -> class name): modules with
    no forward of their own, which a policy never selects (Note [Containers]). `idle`:
    those of `uncalled` no op read in the traced steps (Note [Modules that never ran]).
    `moved`: the first optimizer step named the model (Note [The model], trace/roots.py).
    `classes` (path -> class name): of `uncalled`, for a `@Class` selector (Note [Modules
    run through another method]). `own_call`: those of `uncalled` whose class has a
    `__call__` of its own (Note [A class with a call of its own]). `was`: where the first
    optimizer step named the model, the label its calls had before (Note [Steps that end
    where the model is decided]). `aliases`: each second path of a module the model
    registers under several -> the path it is named by (Note [A module under a second
    path], trace/roots.py). `methods` (path -> name): the method through which a module
    of `uncalled` ran its work (Note [The method that ran]). `made` (path -> class name):
    modules the model's forward made and held nowhere, named by caller and class (Note [A
    selector of a module made in the forward]).
    """
    containers = containers or {}
    modules = list(dict.fromkeys(modules))
    root = next((c for p, c in modules if not p), "")
    # the root ("") is never a region, nor a container: nothing runs its forward
    mods = [(p, c) for p, c in modules if p and p not in containers]
    uncalled = [*uncalled, *containers]
    regions: list[Region] = []
    taken: dict[str, str] = {}
    for part in policy.parts:
        sel = _through_wrappers(part.selector)
        hits = _selected(sel, mods)
        if not hits:
            if was and not mods and (early := _selected(sel, [(p, "") for p in uncalled])):
                raise PolicyError(before_the_model_message(sel, [p for p, _ in early], was))
            if aliases and (second := [p for p, _ in _selected(sel, [(a, "") for a in aliases])]):
                raise PolicyError(second_path_message(sel, second, aliases, dict(modules)))
            if made and (fresh := _selected(sel, list(made.items()))):
                raise MatchesNoModule(made_in_forward_message(sel, fresh, set(made)))
            _refuse_uncalled(sel, _selected(sel, [(p, containers.get(p) or
                                                   (classes or {}).get(p, ""))
                                                  for p in dict.fromkeys(uncalled)]), mods,
                             set(idle), containers, set(own_call), methods or {})
            beside = _beside_the_model(sel, others, mods)
            # Note [The model named once]
            # The advice read "put the modules the script calls (the model, model) in one
            # nn.Module" where the other module's variable is `model` (a time MLP called
            # before it is the model by Note [The model], trace/roots.py: tests/clients/
            # train_mmdit.py's history). The model is said once, as "it" after its class, and
            # the others by their quoted names, as the line's head quotes `beside`.
            if beside:
                model = f" ({_a(root)}: {MODEL_MOVED if moved else MODEL_FIRST})" \
                    if root else ""
                raise PolicyError(
                    f"selector {sel!r} selects modules of {beside!r}, which the script calls "
                    f"beside the model; policies act on the model alone{model}: put "
                    f"{_and(['it', *map(repr, others)])} in one nn.Module whose forward does "
                    f"what the script does, and select inside it")
            if root and sel == f"@{root}" and mods:   # Note [A class selector of the model]
                tops = [(p, c) for p, c in mods if "." not in p]
                raise MatchesNoModule(
                    f"selector {sel!r} names the model's own class: the model is the root "
                    f"of the selectors, never a region (a policy acts inside its forward); "
                    f"select its modules instead: {_names(tops or mods)}")
            names = _names(mods) if mods or not root else f"(none: the model, {_a(root)}, " \
                "has no submodules)"
            if was and not mods and uncalled:   # Note [The model's modules, none called after]
                known = "the model's modules are"
                names = _names([(p, (classes or {}).get(p, "")) for p in
                                dict.fromkeys(uncalled) if p not in containers])
            raise MatchesNoModule(f"selector {sel!r} matches no module"
                                  f"{_deeper(sel, mods)}; {known} {names}{after}")
        for p, c in hits:
            if p in taken:
                raise PolicyError(f"module {p!r} is selected by both {taken[p]!r} and "
                                  f"{part.text()!r}; select each module once")
            taken[p] = part.text()
            regions.append(Region(path=p, cls=c, part=part))
    paths = sorted(taken)
    for a, b in zip(paths, paths[1:]):
        if b.startswith(a + "."):
            raise PolicyError(f"regions nest: {b!r} ({taken[b]}) is inside {a!r} ({taken[a]}); "
                              "select modules that do not contain each other")
    return regions


# Note [The model's modules, none called after]
# Where the first optimizer step named the model (`was`: its calls read as another label
# until then) and none of its modules ran after, the ledger's table of called modules is
# empty, and a selector that matched nothing read "the modules the traced forward called
# are (none recorded)": false (they ran, before the step), and no help, while measure's
# line names the model's modules. lucidrains' RLHFTrainer (tests/clients/
# train_palm_rlhf.py --mode ppo, `--steps 2`: one actor step, one critic step) is a
# module that holds the ActorCritic the first step trains; `checkpoint:palm.layers.*`
# (the trainer's own name for the actor) was refused so by predict. It now names the
# model's modules the ledger knows (those holding parameters; not containers, which no
# policy selects), as measure does: "the model's modules are actor_palm (PaLM), ...".


# Note [A selector of a module made in the forward]
# A module the model's forward makes and holds nowhere (julius's functional
# `lowpass_filter` builds a `LowPassFilters` and calls it, on every call) is named in the
# ledger by its caller's path and its class (Note [Modules the model makes in its forward],
# trace/collector.py): `show` lists `LowPassFilters` (47.6 KiB of activations in
# tests/clients/train_julius.py --fft), and a user writes `checkpoint:LowPassFilters`.
# That name is no path of the model's `named_modules()`, the contract's selector space
# (docs/policies.md), and the module is a new object each call: there is nothing measure
# could wrap before the call, so neither side selects it, by path or by `@Class` (which
# selects the model's own modules of that class, `bands.lowpass` and `lowpasses` there).
# Both refused it as matching no module and listed the model's modules, without it: the
# user was left to guess why the name `show` printed is not one. Both now say what it is,
# in one line, and what to select instead: the module whose forward makes it (the nearest
# caller the model holds), or the module made once in `__init__`. The measure installer
# learns these names as the collector makes them, while a refusal waits (Note [Modules
# made in the forward, named for a refusal], measure/apply.py).
def made_in_forward_message(sel: str, hits: list[tuple[str, str]], made: set[str]) -> str:
    """Why a selector of modules the forward makes and holds nowhere selects nothing."""
    path, cls = hits[0]
    more = f" (and {len(hits) - 1} more)" if len(hits) > 1 else ""
    caller = path.rsplit(".", 1)[0] if "." in path else ""
    while caller in made:   # a module made by another made one: the first held caller
        caller = caller.rsplit(".", 1)[0] if "." in caller else ""
    made_once = f"make it once in {{}}`__init__` (`self.{_attribute_name(cls)} = {cls}(...)`) " \
        "and select that"
    where = (f"select the module whose forward makes it ({caller!r}), or "
             + made_once.format("its ")) if caller else \
        ("the model's own forward makes it, and no policy wraps the model itself: "
         + made_once.format("the model's "))
    return (f"selector {sel!r} matches {path!r}{more}, {_a(cls)} that the model's forward makes "
            f"on each call and holds nowhere (the trace names it by its caller and class); a "
            f"policy acts on the model's own modules (`named_modules()`), and a module made "
            f"anew in each call is none of them: {where}")


def _attribute_name(cls: str) -> str:
    """`lowpass_filters` for `LowPassFilters`: an attribute name for a module of `cls`."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls).lower()


# Note [No model in the steps taken]
# A script may call its model only through a module that holds no parameters and does not
# hold the model (torchdiffeq's `_PerturbFunc` around a closure; tests/clients/
# train_grad_in_setup.py `--setup lrfind --through`, whose first two optimizer steps are an
# LR finder's, each calling the model from a lambda inside such a module). Over those
# steps no module is the model (Note [The model], trace/roots.py: the first top-level
# module with parameters the script calls; the modules with parameters ran inside
# another's call and are named under it), and both sides refused every policy, in
# different words: predict "selector '@Block' matches no module; the modules the traced
# forward called are (none recorded) (... not on call)", measure "the policy never
# applied: the script called no module with parameters" (false: it called them, from
# inside a module without any). And the CLI's measure, which times steps after the
# profiled ones, met the model's first top-level call there, said "applied to 0, 1" and
# printed the profiled peak, taken without the policy (116,040 B, the baseline's), as the
# policy's. Both sides now refuse in one line, from what each knows alike: the number of
# steps, the top-level modules called (by the ledger's label, and class) and that none
# held parameters when first called; measure refuses so wherever no model was found by
# the end of the profiled steps, whatever ran after.
def no_model_message(roots: Iterable[tuple[str, str]], steps: int) -> str:
    """Why a policy never applied: no model was called in the `steps` steps taken."""
    called = [f"{p} ({c})" if c else p for p, c in roots]
    s = "" if steps == 1 else "s"
    seen = (f"the top-level modules the script called ({', '.join(called)}) held no "
            f"parameters when first called") if called else "the script called no module"
    return (f"the policy never applied: no model ran in the {steps} step{s} taken (--steps "
            f"{steps}): {seen}, and a policy acts on the model, {MODEL_FIRST.replace('called', 'calls')}; "
            f"call the model itself (`model(x)`, not only from inside another module) within "
            f"those steps, or take more steps")


# which module is the model, said as Note [The model] (trace/roots.py) decided it
MODEL_FIRST = "the first top-level module with parameters the script called"
MODEL_MOVED = "the top-level module the first optimizer step trained"


def _and(names: list[str]) -> str:
    """`'a'`, `'a' and 'b'`, `'a', 'b' and 'c'`."""
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _a(name: str) -> str:
    return f"{'an' if name[:1] in 'AEIOU' else 'a'} {name}"


# Note [Selectors through a wrapper]
# The trace and the measure worker name modules as the model has them, without a
# wrapper's private segment (`_orig_mod.` of torch.compile, `_forward_module.` of Lightning
# Fabric's `fabric.setup`: ledger/names.py, WRAPPERS). A user who lists the modules of the
# model the script holds (`model.named_modules()` after `model = fabric.setup(model)`, or
# `print(model)`) sees `_forward_module.transformer.h.0` and writes
# `checkpoint:_forward_module.transformer.h.*`: that read "matches no module; the modules
# are transformer.h.0, ..." (a refusal, though it names the very modules meant). A selector
# is read by the rule its names are made by: its wrapper segments dropped. A selector of
# a wrapper alone (`_forward_module`: the whole model, never a region) stays as written.
def _through_wrappers(sel: str) -> str:
    """A selector without a wrapper's segments ('_forward_module.blocks.*' -> 'blocks.*')."""
    if sel.startswith("@"):
        return sel
    return plain_name(sel) or sel


# Note [A star that stays in its segment]
# `*` matches within one path segment (docs/policies.md), so `offload:*.ff` on a model whose
# feed-forwards are `blocks.0.ff` and `blocks.1.ff` matches nothing, and the refusal listed
# every module of the model (a loralib transformer: 21 paths) without saying that the
# pattern, as written, could never reach them. Where the same selector with each lone `*`
# read as `**` (any number of segments) matches, the refusal says so and names what it
# would select.
def _deeper(sel: str, mods: list[tuple[str, str]]) -> str:
    """`(...: `**.ff` matches ...)` where a lone `*` kept `sel` from deeper paths."""
    if sel.startswith("@") or "*" not in sel.replace("**", ""):
        return ""
    deeper = re.sub(r"(?<!\*)\*(?!\*)", "**", sel)
    hits = [p for p, _ in _selected(deeper, mods)]
    if not hits:
        return ""
    shown = ", ".join(hits[:3]) + (f" and {len(hits) - 3} more" if len(hits) > 3 else "")
    return (f" (`*` matches within one path segment: {deeper!r} would match {shown})")


# Note [A class selector of the model]
# The root ("") is never a region: a policy acts inside the model's forward. A `@Class`
# selector naming the model's own class matched nothing and was told "matches no module;
# the modules the traced forward called are ...", a list without the class the user
# named: frame-averaging-pytorch's `FrameAverage(net)` is the model (the module the
# optimizer trains), and `checkpoint:@FrameAverage` read as if no FrameAverage existed.
# It is told that it named the model and which modules lie directly under it (`net
# (ContinuousTransformerWrapper)`); predict and measure resolve through here alike.

def _selected(sel: str, mods: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (path, class name) pairs a selector matches."""
    if sel.startswith("@"):
        return [(p, c) for p, c in mods if c == sel[1:]]
    if not any(ch in sel for ch in "*?["):     # a plain path: no pattern to match
        return [(p, c) for p, c in mods if p == sel][:1]
    rx = glob_regex(sel)
    return [(p, c) for p, c in mods if rx.fullmatch(p)]


# Note [Modules whose forward is called directly]
# torch's module hooks, memledger's among them, fire when a module is called
# (`self.feed_forward(x)`), not when its `forward` is (`self.feed_forward.forward(x)`, as
# llama2.c's TransformerBlock calls its attention and feed-forward): the trace never sees
# where such a module's work begins and ends, only its submodules' calls. Its parameters
# still name it, so a selector that matches it says why it selects nothing, instead of
# listing modules among which the one the user named is missing. The modules named
# around it are the innermost that ran: the call it sits in, and its own submodules.
# measure refuses it in the same words: its policy acts on module calls alone (Note [A
# forward called directly runs plainly], measure/apply.py).
#
# Note [Containers]
# An nn.ModuleList or nn.ModuleDict has no forward of its own: the script calls its
# submodules one by one (makemore's blocks keep their MLP in an nn.ModuleDict and call
# `m.c_proj(m.act(m.c_fc(x)))`; a head list is called `h(x) for h in self.heads`). A policy
# acts on a module's forward, so on a container it does nothing: `measure` wrapped the
# ModuleDict's forward, which nothing calls, said "applied to transformer.h.0.mlp" and
# measured the baseline, while predict refused the same selector saying the script calls
# its `.forward()` directly and to call the module itself, which for a container raises.
# Both now treat a container as a module that never runs: a glob passes over it (as
# predict always did: it never ran), and a selector that matches only containers is
# refused, naming the container's class and the modules to select instead (Note [What a
# container's refusal advises]).
# The trace records the model's containers (`container` records) for predict to say so.
# A module whose forward cannot be called is one too (Note [A forward that is no function],
# trace/roots.py).
#
# Note [A glob of containers]
# A glob may match a container in every block: MEGABYTE-pytorch's `Transformer` keeps each
# layer as `ModuleList([attention, feed-forward])` and unpacks it (`for attn, ff in
# self.layers`), so `checkpoint:transformers.*.layers.*` matches four ModuleLists. The
# refusal named the modules around the first match only ("transformers.0,
# transformers.0.layers.0.0, transformers.0.layers.0.1, transformers.0.layers.0.0.attend"),
# paths of one block where the policy was meant for all: taken as said, it covers the first
# stage's first layer. Where the selector is a pattern that matched several containers and
# none of the modules they hold is one, the refusal adds the pattern one level down
# (`transformers.*.layers.*.*`), which selects what each holds, predicted = measured on
# tests/clients/train_megabyte.py. It reads the containers alone, which predict (the trace's
# `container` records) and measure (the model) know alike, so both say the same line.
#
# Note [What a container's refusal advises]
# The refusal of a container advised "the modules around it that run": the innermost one
# holding it, then the first three inside it by depth and name. Where the container's items
# are containers too (coconut-pytorch's x-transformers decoder keeps each layer as a
# ModuleList of hyper-connection wrappers: `model.layers.0.0`, `.0.1`), the third was a
# module inside an item (`model.layers.0.0.act`, a Tanh), and the first the whole model
# around it. A user writes a container's selector for what it holds: the refusal now lists
# the modules it holds that run, each the first that runs on its way down (no running
# module between it and the container, containers passed through), in natural order
# (`10` after `9`), three then a count, and, where there are several at one depth, the
# glob that selects them all (`model.layers.*.*`; Note [A glob of containers] for a pattern
# that matched several containers). It reads the model's modules and containers alone, so
# predict and measure say the same line. A container none of whose modules ran keeps the
# old advice (Note [A forward that is no function]).
def _held(first: str, inner: list[str], containers: dict[str, str]) -> list[str]:
    """The modules under container `first` (of `inner`, the modules that ran inside it)
    with none of `inner` between them and it, in natural order."""
    ran = set(inner) - set(containers)
    top = [p for p in ran if not any(p.startswith(q + ".") for q in ran)]
    return sorted(top, key=lambda p: [(0, int(x), "") if x.isdigit() else (1, 0, x)
                                      for x in p.split(".")])


# Note [Modules that never ran]
# A multimodal model given text alone never runs its vision tower (transformers' GOT-OCR2,
# Phi-4-multimodal's audio encoder): the modules exist, hold parameters, and no op reads
# them in the steps. predict refused a policy on them as if the script called their
# `.forward()` directly, and measure wrapped them and measured the baseline (a policy
# that does nothing). Both now refuse it in the same words (`idle_modules_message`):
# predict where no op read the modules' parameters after the first forward began
# (prepared.py `_idle_modules`), measure where none of a part's wrapped modules ran in
# the steps it ran (checked as the policy comes off: a layer LayerDrop skipped in the
# first step runs in a later one, and the ledger's steps read it).
def idle_modules_message(sel: str, paths: list[str]) -> str:
    """One line: a selector whose modules never ran in the traced steps."""
    return (f"selector {sel!r} matches {_listed(paths)}, which never ran in the steps (the "
            "script's input never reaches them: a vision tower given text alone, a branch "
            "the config turns off), so a policy on them would change nothing; select "
            "modules the step runs")


# Note [Steps that end where the model is decided]
# A teacher called first (without gradients) is the model until the first optimizer step
# names its student (Note [The model], trace/roots.py); the student's calls before that
# keep the label they were recorded with, and no policy acts on them. Traced and measured
# for one step (`--steps 1`: the runner stops at that very step), the model is never
# called again: predict found none of the student's modules among the model's calls and
# refused `checkpoint:blocks.*` as run "through another of its methods", measure found
# none of its wrapped forwards ran and said they "never ran in the steps (the script's
# input never reaches them ...)". Both were wrong (the blocks ran, under the old label)
# and said differently. Both now say this, where the model was named at the step and no
# call of it under its names followed: predict where the ledger has no module call of
# the model, measure where no call reached the model once the policy went on it.
def before_the_model_message(sel: str, paths: list[str], was: str) -> str:
    """One line: a selector whose modules ran only before the first optimizer step named
    the model, in steps that end there."""
    return (f"selector {sel!r} matches {_listed(paths)}, which ran only before the first "
            "optimizer step decided which module is the model (the first one called with "
            f"parameters had no gradients, as a teacher has; until then the model's calls "
            f"read as {was!r}), and the steps end there, so a policy acts on no call; trace "
            "and measure one step more")


def _listed(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (f", ... ({len(paths) - 3} more)" if len(paths) > 3 else "")


def _refuse_uncalled(sel: str, hits: list[tuple[str, str]],
                     ran: list[tuple[str, str]], idle: set[str] = frozenset(),
                     containers: dict[str, str] | None = None,
                     own_call: set[str] = frozenset(),
                     methods: dict[str, str] | None = None) -> None:
    if not hits:
        return
    paths = [p for p, _ in hits]
    if all(p in idle for p in paths):
        raise PolicyError(idle_modules_message(sel, paths))
    named = _listed(paths)
    first, cls = hits[0]
    ran_names = [p for p, _ in ran]
    outer = max((p for p in ran_names if first.startswith(p + ".")), key=len, default="")
    # by depth, then name: measure lists the model's modules, predict those that ran
    inner = sorted((p for p in ran_names if p.startswith(first + ".")),
                   key=lambda p: (p.count("."), p))
    near = ([outer] if outer else []) + inner[:3]
    if first in (containers or {}):
        alt = f": {', '.join(near)}" if near else ""
        if not inner:   # no submodule ran: its methods did (Note [A forward that is no function])
            raise PolicyError(
                f"selector {sel!r} matches {named}, {_a(cls)}: a module with no forward of its "
                f"own, whose other methods the code calls (`{first}.method(x)`), so a policy "
                f"on it would do nothing; select the modules that call it instead{alt}")
        # Note [What a container's refusal advises]
        held = _held(first, inner, containers or {})
        depth = {p.count(".") for p in held}
        alt = f": {_listed(held)}" if held else alt
        glob = sel + ".*" * (depth.pop() - first.count(".") if len(depth) == 1 else 1)
        # Note [A glob of containers]
        if (len(paths) > 1 or len(held) > 1) and not sel.startswith("@") and \
                "**" not in sel and not _selected(glob, list(containers.items())):
            what = "what each of them holds" if len(paths) > 1 else "them all"
            alt += f" (`{glob}` selects {what})"
        raise PolicyError(
            f"selector {sel!r} matches {named}, {_a(cls)}: a container with no forward of "
            f"its own (the script calls its submodules one by one), so a policy on it would "
            f"do nothing; select the modules it holds that run instead{alt}")
    if all(p in own_call for p in paths):
        raise PolicyError(own_call_message(sel, paths, cls, ran_names))
    raise PolicyError(uncalled_message(sel, paths, ran_names, (methods or {}).get(first, "")))


# Note [What an uncalled module's refusal advises]
# A module whose work never runs as a module call (run through another method: a VAE's
# `model.encode(x)` that calls its submodules itself; its `.forward()` called directly; a
# class with a `__call__` of its own, as gpytorch's) was refused with "modules around it
# that did run": the innermost module holding it, then the first three inside it by
# depth and name. The first is often the whole model's top block (or nothing a policy
# can take), and by depth the three mixed a child with that child's own children
# (`vae.dec, vae.enc, vae.dec.0`). What a user can select instead is what runs inside it
# as a call: the refusal now lists, as a container's does (Note [What a container's
# refusal advises]), the modules inside it that run, each the first that runs on its way
# down, in natural order, three then a count, and, where they sit at one depth, are more
# than one and a glob one level down selects exactly them among the modules that ran
# (those inside every module the selector matched), that glob. Where no module inside it
# runs as a call, it says so in one line, so none inside can be selected, and names the
# innermost module around it that runs (a policy there holds its work and more), or
# that none does. Both sides read the paths that ran as calls alone (predict the
# ledger's module calls, measure the calls it watched inside and above the regions), so
# they say the same line.
def _inside_advice(sel: str, paths: list[str], ran: Iterable[str], calls: str,
                   itself: str = "") -> str:
    """What to select instead of `paths` (modules never called as modules), from the paths
    of the modules that ran as calls: `calls` names such a call ("call", "torch module
    call"); `itself`, where given, the other way out ("call the module itself (...)")."""
    ran = [p for p in dict.fromkeys(ran) if p]
    first = paths[0]
    held = _held(first, [p for p in ran if p.startswith(first + ".")], {})
    alt = f", or {itself}" if itself else ""
    if held:
        every = [h for p in paths for h in _held(p, [q for q in ran if q.startswith(p + ".")],
                                                 {})]
        depth = {p.count(".") for p in held}
        note = ""
        if len(depth) == 1 and len(every) > 1 and not sel.startswith("@") and "**" not in sel:
            glob = sel + ".*" * (depth.pop() - first.count("."))
            if sorted(p for p, _ in _selected(glob, [(q, "") for q in ran])) == sorted(every):
                what = "what each of them holds" if len(paths) > 1 else "them all"
                note = f" (`{glob}` selects {what})"
        return f"select the modules inside it that run as {calls}s: {_listed(held)}{note}{alt}"
    outer = max((p for p in ran if first.startswith(p + ".")), key=len, default="")
    out = [itself] if itself else []
    if outer:
        out.append(f"select the module around it that runs as one, {outer} (a policy there "
                   f"holds its work and more)")
    why = f"no module inside it runs as {_a(calls)}, so none there can be selected"
    return f"{why}: {' or '.join(out)}" if out else \
        f"{why}, and no module around it runs as one either"


# Note [A class with a call of its own]
# gpytorch's `Module` defines its own `__call__`, which runs `forward` without torch's
# module hooks: a botorch `SingleTaskGP` called `model(x)` is never a module call, nor are
# its kernels, mean or likelihood. predict refused `checkpoint:model` with Note [Modules run
# through another method]'s words, whose advice, call the module itself (`self.model(x)`),
# is what the script does. The trace writes an `own_call` record of the model's modules
# whose class has such a `__call__`; a selector that matches only those is told so.
# measure, whose policy is the module's own `forward`, ran it, as for a forward called
# directly (docs/decisions.md, twenty-second session); it now runs such a forward plainly
# and refuses the part in these words (Note [A forward called directly runs plainly],
# measure/apply.py).
def second_path_message(sel: str, paths: list[str], aliases: dict[str, str],
                        classes: dict[str, str]) -> str:
    """One line: a selector that names modules by their second paths only (Note [A module
    under a second path], trace/roots.py)."""
    named = list(dict.fromkeys(aliases[p] for p in paths))
    first = named[0]
    held = [first, *(a for a, n in aliases.items() if n == first)]
    what = _a(classes[first]) if classes.get(first) else "one module"
    return (f"selector {sel!r} matches {_listed(paths)}, "
            f"{'another path' if len(paths) == 1 else 'other paths'} of {_listed(named)}: "
            f"the model registers {what} under several paths ({_listed(held)}), as tied "
            f"layers are, and names it by its first, as `named_modules()` lists it; a policy "
            f"acts on a module, so on every call of it: select {_listed(named)} (all of its "
            f"calls), or give each layer a module of its own")


def own_call_message(sel: str, paths: list[str], cls: str, ran: Iterable[str]) -> str:
    """One line: a selector whose modules' classes call their forward themselves; `ran`:
    the paths of the modules that ran as calls (Note [What an uncalled module's refusal
    advises])."""
    return (f"selector {sel!r} matches {_listed(paths)}, never called as a module: its class "
            f"({cls}) has a `__call__` of its own, as gpytorch's modules have, which runs "
            f"`forward` without torch's module hooks, the trace's among them, so the trace "
            f"cannot tell where its work begins and ends; "
            f"{_inside_advice(sel, paths, ran, 'torch module call')}")


# Note [Modules run through another method]
# A module's work need not run through its forward: normalizing flows run a flow layer
# through its `inverse` when the model is fitted by maximum likelihood (normflows'
# `NormalizingFlow.forward_kld` calls `flows[i].inverse(z)`; only the networks inside, called
# as modules, are module calls), a VAE through `encode`/`decode`. No module hook sees such a
# call, so the trace cannot tell where its work begins and ends, and a policy, which acts on
# a module's forward, would act on nothing. predict said only "the script calls its
# `.forward()` directly", and measure, whose wrapped forward never ran, said the modules
# "never ran in the steps (the script's input never reaches them ...)", though they ran
# every step. Both now say it in these words: measure where the part's modules' own
# forwards never ran but their parameters were used (a gradient, or written by a step),
# predict where modules inside them ran as calls or an op read their parameters.
# Note [The method that ran]
# The line above gave the same guesses for every module (`.inverse(x)`, `.encode(x)`, a
# forward called directly, a container), though both sides can know which method ran:
# xlstm's greedy decoding runs `mLSTMCell.step`, and `checkpoint:@mLSTMCell` was refused
# with `xlstm_block_stack.blocks.0.xlstm.mlstm_cell.inverse(x)` for an example
# (tests/clients/train_xlstm.py --mode generate; plain torch: tests/clients/
# train_method_call.py). The trace writes a `method` record the first time a module's
# public method makes a storage outside any call (Note [Work a module's method does
# outside any call], trace/collector.py); measure wraps the region's public methods (Note
# [Work no gradient shows], measure/apply.py) and notes the first that ran where the trace
# looks: no module call open, not in backward, not between an optimizer step and the
# model's next call (`_method_counts`; without it measure alone named ncps' LTC cell's
# `apply_weight_constraints`, called after `opt.step()`, and a frozen encoder's `encode`
# called inside the model's forward). Where the
# first module matched has one, the line names it: "the code runs its work through its
# method `step` (`....mlstm_cell.step(...)`), which no module hook sees". A side that
# knows none (a method that made nothing, one run inside another module's call) says
# the line above.
def uncalled_message(sel: str, paths: list[str], ran: Iterable[str], method: str = "") -> str:
    """One line: a selector whose modules' work ran, but never as a module call (Note
    [Modules run through another method], Note [Modules whose forward is called
    directly]); `ran`: the paths of the modules that ran as calls (Note [What an uncalled
    module's refusal advises]); `method`: the method of `paths[0]` that ran, where known
    (Note [The method that ran])."""
    leaf = _attribute(paths[0])
    advice = _inside_advice(sel, paths, ran, "call", f"call the module itself (`self.{leaf}(x)`)")
    if method:
        return (f"selector {sel!r} matches {_listed(paths)}, never called as a module: the "
                f"code runs its work through its method `{method}` "
                f"(`{paths[0]}.{method}(...)`), which torch's module hooks, the trace's "
                f"among them, do not see, so the trace cannot tell where its work begins "
                f"and ends, and a policy acts on a module's call; {advice}")
    return (f"selector {sel!r} matches {_listed(paths)}, never called as a module: the code "
            f"runs its work through another of its methods (`{paths[0]}.inverse(x)`, "
            f"`{paths[0]}.encode(x)`) "
            f"or calls its `.forward()` directly (`self.{leaf}.forward(x)`) or, for a "
            f"container (an nn.ModuleList), its submodules one by one; torch's module hooks, "
            f"the trace's among them, see none of these, so the trace cannot tell where its "
            f"work begins and ends, and a policy acts on a module's call; {advice}")


def _attribute(path: str) -> str:
    """How the module's parent reaches it in code: `blocks` for `enc.blocks`, `layers[0]`
    for `mamba.layers.0`, an item of a ModuleList (`self.0(x)` is no Python)."""
    parts = path.split(".")
    if parts[-1].isdigit() and len(parts) > 1:
        return f"{parts[-2]}[{parts[-1]}]"
    return parts[-1]

# Note [A pattern's head beside the model]
# A selector whose first part is a pattern (`*.disco`) was read as naming the first module
# the script calls beside the model that the pattern matched: on torch-harmonics' blocks of
# `blocks.N.disco` (train_harmonics.py --model sht), `checkpoint:*.disco` was refused as
# "selects modules of 'loss_fn', which the script calls beside the model", though the loss
# has no `disco` and `*` matches the model's own `blocks` as well; the user's mistake was
# the lone `*` (one path segment). A pattern that matches one of the model's top-level
# names says nothing about the modules beside it, so the refusal is the plain one, with
# its hint that `**.disco` would match blocks.0.disco and blocks.1.disco.

def _beside_the_model(selector: str, others: Iterable[str],
                      mods: list[tuple[str, str]] = ()) -> str:
    """The top-level module besides the model (`blocks`, named as the script calls it:
    Note [Root names], trace/roots.py) whose name the selector's first part matches, and
    none of the model's own top-level modules (`mods`) does: `*.disco` names no module
    beside the model when `*` matches the model's `blocks` as well (Note [A pattern's
    head beside the model])."""
    if selector.startswith("@"):
        return ""
    head = selector.split(".")[0]
    rx = glob_regex(head) if any(ch in head for ch in "*?[") else None
    if rx is not None and any(rx.fullmatch(p.split(".")[0]) for p, _ in mods):
        return ""
    return next((o for o in others if o and (o == head or (rx is not None and
                                                            rx.fullmatch(o)))), "")


def _names(mods: list[tuple[str, str]], limit: int = 24) -> str:
    mods = sorted(mods)
    shown = [f"{p} ({c})" if c else p for p, c in mods[:limit]]
    more = f", ... ({len(mods) - limit} more)" if len(mods) > limit else ""
    return ", ".join(shown) + more if shown else "(none recorded)"


# ---- TOML files ---------------------------------------------------------------------------
class PolicyFileEntry(BaseModel):
    """One `[[policy]]` table of a policy file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("", description="a label for tables")
    policy: str = Field(description="the policy string, e.g. 'checkpoint:blocks.*'")


class PolicyFile(BaseModel):
    """A TOML policy file: `[[policy]]` tables with `name` and `policy`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: list[PolicyFileEntry] = Field(default_factory=list)


def load_policies(path: str | Path) -> list[Policy]:
    """Policies from a TOML file (see configs/policies.toml)."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PolicyError(f"no policy file at {str(path)!r}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise PolicyError(f"policy file {str(path)!r} is not valid TOML: {e}") from None
    try:
        pf = PolicyFile.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise PolicyError(f"policy file {str(path)!r}: {loc}: {first['msg']}; each [[policy]] "
                          "has policy = '...' and an optional name") from None
    if not pf.policy:
        raise PolicyError(f"policy file {str(path)!r} has no [[policy]] table")
    return [parse_policy(e.policy).model_copy(update={"name": e.name}) for e in pf.policy]


def policies_from_args(values: Iterable[str]) -> list[Policy]:
    """`--policy` values: a policy string, or `@file.toml` / a path ending in .toml."""
    out: list[Policy] = []
    for v in values:
        if v.startswith("@") and v.endswith(".toml") or v.endswith(".toml"):
            out.extend(load_policies(v.removeprefix("@")))
        else:
            out.append(parse_policy(v))
    return out
