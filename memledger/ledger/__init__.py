"""The ledger: data model, file format and queries. Never imports torch."""

from memledger.ledger.model import Ledger, PeakPoint
from memledger.ledger.schema import CATEGORIES, PHASES, SCHEMA, Category, Phase

__all__ = ["Ledger", "PeakPoint", "Category", "Phase", "CATEGORIES", "PHASES", "SCHEMA"]
