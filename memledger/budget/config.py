"""Where a budget comes from: flags, a TOML file, or `[tool.memledger.budget]` in
pyproject.toml. Flags override the file key by key (`--category activation=...` replaces only
that category). Every problem is a BudgetError (exit 2) with one line per problem.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from memledger.budget.model import Budget
from memledger.errors import BudgetError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the dev machines and CI run 3.11
    import tomli as tomllib

PYPROJECT_TABLE = ("tool", "memledger", "budget")


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed TOML file; a missing, unreadable or malformed file is a BudgetError."""
    p = Path(path)
    if not p.exists():
        raise BudgetError(f"no budget file at {str(path)!r}; give an existing TOML file")
    if p.is_dir():
        raise BudgetError(f"{str(path)!r} is a directory; give a TOML budget file")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise BudgetError(f"cannot read budget file {str(path)!r}: {e.strerror}; "
                          "check its permissions") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BudgetError(f"budget file {str(path)!r} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise BudgetError(f"budget file {str(path)!r} is not valid TOML: {e}") from None


def pyproject_table(data: dict[str, Any], path: Path) -> Any:
    """`[tool.memledger.budget]` of a parsed pyproject.toml, or None when it has none.

    `[tool.memledger] budget = "2GiB"` is read as the peak; budget keys written directly
    under `[tool.memledger]` (peak, categories, ...) are refused with where they belong."""
    tool = data.get("tool", {}).get("memledger") if isinstance(data.get("tool"), dict) else None
    if not isinstance(tool, dict):
        return None
    misplaced = [k for k in tool if k in Budget.model_fields]
    if misplaced:
        raise BudgetError(f"{str(path)!r}: {misplaced[0]!r} is under [tool.memledger]; budget "
                          "keys go under [tool.memledger.budget] (e.g. peak = \"2GiB\")")
    table = tool.get("budget")
    if isinstance(table, (str, int)) and not isinstance(table, bool):
        return {"peak": table}
    return table


def table_of(path: Path) -> dict[str, Any]:
    """The budget table of a file: the whole file, or `[tool.memledger.budget]` of a
    pyproject.toml (which must then exist)."""
    data = read_toml(path)
    if Path(path).name != "pyproject.toml":
        return data
    table = pyproject_table(data, Path(path))
    if table is None:
        raise BudgetError(f"{str(path)!r} has no [tool.memledger.budget] table; add one "
                          "(see docs/budgets.md) or pass --budget")
    if not isinstance(table, dict):
        raise BudgetError(f"[tool.memledger.budget] in {str(path)!r} must be a table")
    return table


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start` that has a memledger budget.

    # Note [Where a budget is found]
    Walk up from `start` (the current folder) to the root; a pyproject.toml WITHOUT
    `[tool.memledger.budget]` (a sub-package's own) is skipped, so it never hides the
    repository's budget above it; the first one WITH the table is used. A pyproject.toml on
    the way that cannot be read or parsed is exit 2 (it might hold the budget: a typo must
    never turn a budget into a pass). Example: repo/pyproject.toml has peak = "2GiB",
    repo/pkg/pyproject.toml has only [project]: `memledger check` in repo/pkg checks 2 GiB.
    """
    for d in (start.resolve(), *start.resolve().parents):
        p = d / "pyproject.toml"
        if p.is_file():
            if pyproject_table(read_toml(p), p) is not None:
                return p
    return None


def merge(base: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """Flags over file: nested tables merge key by key, everything else is replaced."""
    out = dict(base)
    for k, v in flags.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


def build_budget(data: dict[str, Any], source: str) -> Budget:
    """Validate; a ValidationError becomes a BudgetError with one line per problem."""
    try:
        return Budget.model_validate(data)
    except ValidationError as e:
        raise BudgetError("\n".join(f"memledger: {source}: {line}"
                                    for line in validation_lines(e, Budget))) from None


def load_budget(config: Path | None = None, flags: dict[str, Any] | None = None,
                search_from: Path | None = None) -> tuple[Budget, list[str]]:
    """(budget, sources). `config` may be a TOML budget file or a pyproject.toml; without one,
    the nearest pyproject.toml with [tool.memledger.budget] above `search_from` is used."""
    sources: list[str] = []
    base: dict[str, Any] = {}
    if config is not None:
        base = _anchor(table_of(config), Path(config))
        sources.append(str(config))
    elif search_from is not None and (found := find_pyproject(search_from)) is not None:
        base = _anchor(table_of(found), found)
        sources.append(f"{found} [tool.memledger.budget]")
    flags = {k: v for k, v in (flags or {}).items() if v not in (None, {}, [])}
    if flags:
        sources.append("flags")
    budget = build_budget(merge(base, flags), " + ".join(sources) or "budget")
    if not budget.has_limits:
        raise BudgetError("no limit to check; pass --budget 1.2GiB, --category "
                          "activation=300MiB, --baseline LEDGER --max-increase 5%, or --config")
    return budget, sources


def _anchor(table: dict[str, Any], path: Path) -> dict[str, Any]:
    """A baseline ledger named in a file is relative to that file (as --baseline is to the
    current directory), so a budget file works from wherever CI runs it."""
    b = table.get("baseline")
    if isinstance(b, dict) and isinstance(b.get("ledger"), str) and \
            not Path(b["ledger"]).is_absolute():
        table = {**table, "baseline": {**b, "ledger": str(path.parent / b["ledger"])}}
    return table


def validation_lines(e: ValidationError, model: type[BaseModel]) -> list[str]:
    """One readable line per pydantic error: `categories.activation: size '800' has no
    unit; write 800MiB, 800GiB or 800B`."""
    lines = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(_fields_at(model, err["loc"][:-1]))
            lines.append(f"unknown key {loc!r}; allowed here: {allowed}")
            continue
        if err["type"] == "missing":
            lines.append(f"{loc} is required{_HINTS.get(loc, '')}")
            continue
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}" if loc else msg)
    return lines


_HINTS = {
    "baseline.max_increase": " with a baseline: --max-increase 5% (or max_increase = \"5%\")",
    "step_time.max": ": --step-time 900ms (or max = \"900ms\" under [step_time])",
}


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the (nested) model at `loc`."""
    m: Any = model
    for part in loc:
        field = m.model_fields.get(part) if isinstance(m, type) else None
        if field is None:
            return []
        m = next((a for a in (field.annotation, *typing.get_args(field.annotation))
                  if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if m is None:
            return []
    return list(m.model_fields)
