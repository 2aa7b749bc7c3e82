"""Importers: other tools' memory records turned into memledger ledgers (no torch needed)."""
