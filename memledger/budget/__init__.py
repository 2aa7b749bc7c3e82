"""Memory budgets: a Budget (what a step may use), loaded from flags / TOML / pyproject,
checked against a Ledger (`evaluate`), reported as text, JSON, JUnit XML or Markdown.
No torch import here: budgets check ledger files anywhere."""

from memledger.budget.config import build_budget, load_budget
from memledger.budget.evaluate import evaluate
from memledger.budget.model import Budget
from memledger.budget.result import CHECK_SCHEMA, CheckResult, LimitResult

__all__ = ["Budget", "CHECK_SCHEMA", "CheckResult", "LimitResult", "build_budget", "evaluate",
           "load_budget"]
