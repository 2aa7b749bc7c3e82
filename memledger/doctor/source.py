"""The line of a user's file where a variable is accumulated into (no torch, no import).

`total_loss += loss` holds every step's graph; the probe knows the variable (`total_loss`)
and the file it lives in, the line comes from the file's syntax tree: an augmented
assignment to it first, then `.append` / `.extend` / `.insert` on it, then an assignment
whose value reads it (`total = total + loss`), then any assignment.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache


@lru_cache(maxsize=32)
def _tree(file: str) -> ast.AST | None:
    try:
        with open(file, encoding="utf-8") as fh:
            return ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _is(node: ast.AST, var: str) -> bool:
    """`var`, or an attribute of that name (`self.var`: a module attribute); `var` may be a
    path (`self.losses`, `meter.sum`: its last attribute, as a method of the class writes
    it), and `node` an item of it (`history['loss']` is `history`'s)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    last = var.rsplit(".", 1)[-1]
    return (isinstance(node, ast.Name) and node.id == var) or \
        (isinstance(node, ast.Attribute) and node.attr in (var, last))


_NUMBER_CALLS = frozenset({"item", "detach", "tolist", "float", "int", "cpu"})


def _plain_number(node: ast.AST) -> bool:
    """`loss.item()`, `float(loss)`, `loss.detach()`: carries no history (ranked last)."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr in _NUMBER_CALLS) or \
        (isinstance(f, ast.Name) and f.id in _NUMBER_CALLS)


# Note [The function whose variable it is]
# A variable is found by name in a frame, and the file may bind that name in several
# functions: tests/clients/train_tcn.py binds `loss` in `train_tcn` (line 114, the TCN's
# modes) and in `train_entmax` (line 223); `--mode bisect` runs only the second, whose
# spent graph holds entmax_bisect's alpha on ctx, and the doctor's finding pointed at
# line 114, a line that never ran, the first `loss =` of the file. The probe now writes the
# line its frame was at (`at`, 0 for a module's globals), and the line is looked for in
# the innermost function that holds that line first, in the whole file only when that
# function binds no such name.
def _scope(tree: ast.AST, at: int) -> ast.AST:
    """The innermost function of `tree` whose lines hold line `at` (`tree` itself if none)."""
    best = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.lineno <= at <= (node.end_lineno or node.lineno) and \
                (best is tree or node.lineno >= best.lineno):
            best = node
    return best


def accumulation_line(file: str, var: str, at: int = 0) -> int:
    """1-based line where `var` is accumulated into (0 when the file or the name is not
    found); `at`: a line of the function whose variable it is (Note [The function whose
    variable it is]), 0 for a module's globals (Note [A state a call hands back])."""
    tree = _tree(file) if file and var else None
    if tree is None:
        return 0
    scope = _scope(tree, at) if at else tree
    # Note [A state a call hands back]: the scope's own statements first
    best = _ranked_lines(_own_nodes(scope, var), var) or _ranked_lines(ast.walk(tree), var)
    return best[1] if best else 0


# Note [A state a call hands back]
# A recurrent state a model hands back with its output, `out, h = model(x, h)`, not
# detached where the next step begins and kept across it by `backward(retain_graph=True)`
# (the backward does not fail: every step's backward runs through every earlier step's
# graph again), is `cross_step_retention`'s finding at the line that rebinds it. That
# line binds a tuple, which the search for the line skipped: on tests/doctor/
# carried_retained.py (`h`, a module-level loop) the finding pointed at line 22, the
# model's own `h = torch.tanh(self.inp(x) + h * self.decay)` inside its forward, another
# variable of the same name, and its twin for `out` at line 0; on memory-transformer-xl
# (tests/clients/train_memxl.py --loop hand --bug no-detach) at `memories =
# memories._replace(long=memories.long.detach())`, the very line that the bug skips and
# that fixes it. A target tuple (or list, or a starred item) binds each name in it, and a
# scope's variable is looked for in the scope first, less the bindings of that name in
# the functions and classes it defines (theirs, unless declared `global` there; a
# module's globals have `at` 0, the module's scope; a module's list filled by a function,
# `LOSSES.append(loss)`, is still the module's), in the whole file only where the scope
# binds no such name.
# The advice for such a line is the carried state's: detach it where the step begins
# (`state_fed_back`, doctor/retention.py), not "keep what that line adds detached".
_CUT_RANK = 4   # the rank of a line that cuts the graph (Note [A plain number ...])


def _own_nodes(scope: ast.AST, var: str):
    """The nodes of `scope` that can bind or fill its `var`: all of them, less the
    bindings of a plain `var` inside a function, lambda or class it defines (a local of
    theirs, unless declared `global` or `nonlocal` there); what they do to it otherwise
    (`LOSSES.append(loss)` on a module's list) is the scope's (Note [A state a call hands
    back])."""
    stack = [(child, False) for child in ast.iter_child_nodes(scope)]
    while stack:
        node, nested = stack.pop()
        if nested and isinstance(node, (ast.Assign, ast.AugAssign)) and any(
                _binds_name(t, var) for t in
                (node.targets if isinstance(node, ast.Assign) else [node.target])):
            continue
        yield node
        inner = nested
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                             ast.Lambda)):
            inner = not any(isinstance(n, (ast.Global, ast.Nonlocal)) and var in n.names
                            for n in ast.walk(node))
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def _binds_name(target: ast.AST, var: str) -> bool:
    """`target` binds the plain name `var` (alone or in a tuple or list)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_binds_name(t, var) for t in target.elts)
    if isinstance(target, ast.Starred):
        return _binds_name(target.value, var)
    return isinstance(target, ast.Name) and target.id == var


def _binds(target: ast.AST, var: str) -> bool:
    """`target` binds `var`: the name (or an item of it) itself, or one of a tuple's or a
    list's (`out, h = rnn(x, h)`, `*hs, h = ...`)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_binds(t, var) for t in target.elts)
    if isinstance(target, ast.Starred):
        return _binds(target.value, var)
    return _is(target, var) or (isinstance(target, ast.Subscript) and _is(target.value, var))


def _ranked_lines(nodes, var: str) -> tuple[int, int] | None:
    """(rank, line) of the node that best accumulates into `var`, None if none binds it."""
    ranked: list[tuple[int, int]] = []
    # Note [A plain number accumulates no history]: `total += loss.item()` and
    # `xs.append(x.detach())` rank with the assignments that cut the graph (4), after every
    # form that can carry it. A loop with both branches (tests/clients/train_hf.py
    # --eval-bug sum-loss: `total = total + out.loss` at 147 under the bug, `total +=
    # out.loss.item()` at 149 otherwise) was pointed at the line that keeps nothing (149,
    # the augmented one ranked 1 against the assignment's 3).
    for node in nodes:
        if isinstance(node, ast.AugAssign) and _is(node.target, var):
            ranked.append((_CUT_RANK if _plain_number(node.value) else 0, node.lineno))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "extend", "insert") and _is(node.func.value, var):
            ranked.append((_CUT_RANK if _plain_number(node.args[0] if node.args else node)
                           else 1, node.lineno))
        elif isinstance(node, ast.Assign) and any(_binds(t, var) for t in node.targets):
            reads = any(_is(n, var) for n in ast.walk(node.value))
            cuts = any(_plain_number(n) for n in ast.walk(node.value))
            ranked.append(((3 if not cuts else _CUT_RANK) if reads else 5, node.lineno))
    return min(ranked) if ranked else None


def state_fed_back(file: str, line: int, var: str) -> bool:
    """The statement at `line` binds `var` from a call that reads it, not from a sum (`out,
    h = model(x, h)`: a state a call hands back, Note [A state a call hands back])."""
    tree = _tree(file) if file and var and line else None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign) and node.lineno == line \
                and any(_binds(t, var) for t in node.targets):
            return isinstance(node.value, ast.Call) and not _cuts(node.value) \
                and any(_is(n, var) for n in ast.walk(node.value))
    return False


def _cuts(value: ast.AST) -> bool:
    """The value detaches what it reads (`h.detach()`, `h.data`, a comprehension of them):
    the line that fixes a carried state, not the one that carries it. A conditional
    detaches where both its branches do (`loss if keep_graph else loss.detach()` may
    carry)."""
    if isinstance(value, ast.IfExp):
        return _cuts(value.body) and _cuts(value.orelse)
    return any((isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("detach", "detach_")) or
               (isinstance(n, ast.Attribute) and n.attr == "data") for n in ast.walk(value))


def feeds_itself(file: str, var: str) -> bool:
    """`var` is bound again from a value that reads it somewhere in `file` (`state =
    cell(x, state)`), a detach aside (Note [A variable that carried the graph into a
    failed backward] in trace/doctor_retention.py)."""
    return _rebindings(file, var).get(0) is not None


def _rebindings(file: str, var: str) -> dict[int, int]:
    """{rank: first line}: 0 bound from a value that reads it, 1 an item of it bound
    (`ema[name] = loss`: where a container is filled with what it carries, Note [The value
    backwarded carries nothing] in trace/doctor_retention.py), 2 bound, 3 bound from a
    value that detaches what it reads."""
    tree = _tree(file) if file and var else None
    ranked: dict[int, int] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_is(n, var) for t in targets for n in ast.walk(t)):
                reads = any(_is(n, var) for n in ast.walk(node.value))
                item = any(isinstance(t, ast.Subscript) and _is(t.value, var)
                           for t in targets)
                rank = 3 if _cuts(node.value) else 0 if reads else 1 if item else 2
                ranked[rank] = min(ranked.get(rank, node.lineno), node.lineno)
    return ranked


def names_read_at(file: str, line: int) -> set[str]:
    """The plain names the statement at `line` of `file` reads (`(loss / n).backward()`:
    `loss`, `n`); empty when the file or the line is not found."""
    tree = _tree(file) if file and line else None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.ClassDef,
                                                                  ast.AsyncFunctionDef)) \
                and node.lineno <= line <= (node.end_lineno or node.lineno) \
                and not any(isinstance(c, ast.stmt) for c in ast.iter_child_nodes(node)):
            return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return set()


def rebinding_line(file: str, var: str) -> int:
    """1-based line where `var` is bound again from a value that reads it (`out, h =
    rnn(x, h)`: a state carried from one step to the next), else where it is bound at
    all; 0 when the file or the name is not found."""
    ranked = _rebindings(file, var)
    return ranked[min(ranked)] if ranked else 0


# Note [The tensor an accumulation adds]
# `cross_step_retention`'s advice was "accumulate loss.item() or loss.detach() instead"
# whatever the line adds: a MoE loop summing its auxiliary losses for a log (`aux_sum =
# aux_sum + aux`, tests/clients/train_moe.py --log-aux) was told to accumulate `loss`,
# which it does not touch there. The advice now names what the line adds when that is a
# plain name or attribute (`aux`, `out.loss`, `self.aux`): `x += aux`, `x = x + aux` (or
# `aux + x`), `xs.append(aux)`. Anything else (`val * n`, a tuple, a call) kept `loss`,
# a name the line may not hold: a streaming evaluation run with gradients on,
# `outs.append(model.tcn.inference(chunk))` (tests/clients/train_tcn.py --eval-grad
# --steps-by forward), was told to "accumulate loss.item() or loss.detach()". It is told
# to keep what that line adds detached now (`.item()` of a number, `.detach()` of a
# tensor), which is right whatever the line adds.
def accumulated_value(file: str, line: int, var: str) -> str | None:
    """The plain name or attribute that `var` accumulates at `line` (None: not one)."""
    tree = _tree(file) if file and var and line else None
    if tree is None:
        return None
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) != line:
            continue
        value = None
        if isinstance(node, ast.AugAssign) and _is(node.target, var):
            value = node.value
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp) and any(
                _is(t, var) for t in node.targets):
            left, right = node.value.left, node.value.right
            value = right if _is(left, var) else left if _is(right, var) else None
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "insert") \
                and _is(node.func.value, var) and node.args:
            value = node.args[-1]
        if value is not None and _plain_path(value):
            return ast.unparse(value)
    return None


# Note [What the line adds holds the tensors]
# The advice "accumulate hiddens.item() or hiddens.detach() instead" is right where the
# line adds a tensor. HRM-pytorch's model returns its hidden states as a `dict_values`
# view, and tests/clients/train_hrm.py --keep-hiddens keeps them by
# `kept.append(hiddens)`: the tensors kept are `kept[0][0]`, `kept[0][1]`, ..., items of
# what the line adds, which has no `.detach()` (a tuple neither). Where the tensors'
# names go two indices or more below what the line appends to (`kept`, not
# `history["loss"]`, whose `history['loss'][0]` is the tensor appended), the advice says
# to detach each tensor it holds, as the carried state's finding does.
def accumulation_target(file: str, line: int, var: str) -> str | None:
    """What `var` accumulates into at `line` as the script writes it: the list an
    `append` / `insert` adds to (`history["loss"]`), or `var` itself for `var += x`
    (None: no such line)."""
    tree = _tree(file) if file and var and line else None
    for node in ast.walk(tree) if tree is not None else ():
        if getattr(node, "lineno", None) != line:
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "insert") and _is(node.func.value, var):
            return ast.unparse(node.func.value)
        if isinstance(node, (ast.AugAssign, ast.Assign)):
            return var
    return None


def holds_items(names: list[str], target: str) -> bool:
    """Whether the tensors `names` (`kept[0][1]`) are items of what is appended to
    `target` (`kept`) rather than what is appended (Note [What the line adds holds the
    tensors])."""
    def depth(s: str) -> int:
        tail = re.search(r"(\[[^\[\]]*\])+$", s)
        return len(re.findall(r"\[", tail.group(0))) if tail else 0
    return any(depth(n) > depth(target) + 1 for n in names)


def _plain_path(node: ast.AST) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def call_in_loop(file: str, name: str) -> int:
    """1-based line of a call of `name` (`Adam(...)`, `torch.optim.Adam(...)`) inside a
    loop of `file`; 0 when there is none (Note [An optimizer built again every step] in
    doctor/params.py)."""
    tree = _tree(file) if file and name else None
    if tree is None:
        return 0
    for loop in ast.walk(tree):
        if not isinstance(loop, _LOOPS):
            continue
        for node in ast.walk(loop):
            if isinstance(node, ast.Call) and _is(node.func, name):
                return node.lineno
    return 0


def _innermost_loop(tree: ast.AST, line: int) -> ast.AST | None:
    best = None
    for node in ast.walk(tree):
        if isinstance(node, _LOOPS) and node.lineno <= line <= (node.end_lineno or 0):
            if best is None or node.lineno >= best.lineno:
                best = node
    return best


def method_call_line(file: str, var: str, method: str, near: int) -> int:
    """1-based line of a `var.method(...)` call (`sched.step()`, `self.sched.step()`) that
    ran before line `near` did: in the innermost loop holding `near`, the first such call
    above it, else the first in that loop, else the first in the file (0 when none).

    `sched.step()` before the first `optimizer.step()` at `near`: the calls above it in the
    loop are the candidates; a loop that steps the optimizer every K micro-batches and the
    scheduler after it, every micro-batch, has its call below."""
    tree = _tree(file) if file and var else None
    if tree is None:
        return 0
    calls = sorted(node.lineno for node in ast.walk(tree)
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                   and node.func.attr == method and _is(node.func.value, var))
    if not calls:
        return 0
    loop = _innermost_loop(tree, near)
    if loop is not None:
        inside = [c for c in calls if loop.lineno <= c <= (loop.end_lineno or 0)]
        above = [c for c in inside if c < near]
        if above or inside:
            return (above or inside)[0]
    return calls[0]
