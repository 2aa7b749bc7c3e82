"""The client tier's modules import no client library at their top level (Note [Tier modules
import nothing at collection], tests/clients/harness.py): every pytest worker imports every
test module to collect it, and would pay each library's import for tests it never runs."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
# what every worker imports anyway: the standard library, pytest, torch (the harness's
# memledger imports it), numpy (torch's), and the suite's own code
ALLOWED = set(sys.stdlib_module_names) | {"pytest", "torch", "numpy", "memledger", "tests"}


def _top_level_imports(tree: ast.Module) -> list[str]:
    """The modules a module's own top-level statements import, `pytest.importorskip(...)`
    included (it imports what it is asked about)."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
        elif isinstance(node, (ast.Expr, ast.Assign)) and isinstance(node.value, ast.Call):
            call = node.value
            if ast.unparse(call.func) == "pytest.importorskip" and call.args:
                found.append(ast.literal_eval(call.args[0]))
    return found


def test_tier_modules_import_no_library_at_their_top_level():
    offenders = {}
    for path in sorted(CLIENTS.glob("test_*.py")):
        names = _top_level_imports(ast.parse(path.read_text(encoding="utf-8")))
        bad = [n for n in names if n.split(".")[0] not in ALLOWED]
        if bad:
            offenders[path.name] = bad
    assert offenders == {}, "import these in the tests or in harness.imported_first " \
        f"(Note [Tier modules import nothing at collection]): {offenders}"


def test_the_check_sees_each_way_a_module_imports():
    tree = ast.parse("import pytest\nimport kornia.losses\nfrom peft import LoraConfig\n"
                     "pytest.importorskip('monai')\nx = pytest.importorskip('trl')\n"
                     "def f():\n    import diffusers\n")
    assert _top_level_imports(tree) == ["pytest", "kornia.losses", "peft", "monai", "trl"]
