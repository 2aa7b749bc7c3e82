"""Collectors: the only code that hooks torch while recording a ledger."""
