"""Reporters: turn a ledger (or a result built on one) into something a person reads."""
