"""`memledger doctor`: the training mechanics checked before anything is compared.

The probe (memledger/trace/doctor_probe.py) records what happened; the checks here read
those records (plain dicts, no torch) and return findings (findings.py).
"""
