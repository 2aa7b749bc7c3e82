"""Correctness before performance: does a policy leave the training unchanged?

- `capture.py`  what one run records (inputs, gradients, post-step state), in-process hooks
- `runs.py`     one capture run, in this process or a fresh one (`worker.py`)
- `diff.py`     two captures compared step by step, gate by gate
- `tolerance.py` when two tensors count as the same (bitwise, rtol, noise floors)
- `gates.py`    baseline twice (determinism, noise floor), then each candidate
- `compare.py`  gates, then predict + measure, then verdicts (`memledger compare`)
- `verdict.py`  the `memledger.compare/1` model and the ADOPT/OK/REJECT rule (no torch)
- `broken.py`   deliberately broken candidates, for tests only

See docs/compare.md.
"""
