"""One gradient-capture run in a fresh process: `python -m memledger.verify.worker`.

    python -m memledger.verify.worker --out run.capture --status s.json --steps 3 \\
        --policy 'checkpoint:blocks.*' train.py -- --batch-size 8

The policy lands on the model through `install_policy` (as in `memledger measure`); the
capture hooks record inputs, gradients and post-step state (memledger/verify/capture.py).
No memory is measured here: capture copies tensors, so it runs apart from the measurement.
`--broken NAME --selector SEL` applies a test-only broken candidate instead (broken.py).
"""

from __future__ import annotations

import argparse
import json
import sys

from memledger.errors import EXIT_USAGE, OutputError, PolicyError
from memledger.outputs import writing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="memledger.verify.worker")
    p.add_argument("--out", required=True)
    p.add_argument("--status", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--policy", default="none")
    p.add_argument("--broken", default="")
    p.add_argument("--selector", default="")
    p.add_argument("--steps-by", default="optimizer")   # trace/steps.py
    p.add_argument("script")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.argv and args.argv[0] == "--":
        args.argv = args.argv[1:]

    from memledger.trace.rank import for_rank

    # under torchrun (`compare --nproc`): one capture and one status per rank
    args.out, args.status = for_rank(args.out), for_rank(args.status)
    from memledger.verify.capture import save_capture
    from memledger.verify.runs import Variant, capture_in_process

    variant = Variant(args.policy, args.policy, args.broken, args.selector)
    try:
        res = capture_in_process(args.script, args.argv, variant, args.steps,
                                 steps_by=args.steps_by)
    except PolicyError as e:
        return _status(args.status, EXIT_USAGE, str(e), policy_error=True)
    if res.data is not None:
        try:
            with writing(args.out, "the gradient capture"):
                save_capture(res.data, args.out)
        except OutputError as e:   # Note [A full temporary folder]: the partial file is gone
            return _status(args.status, EXIT_USAGE, str(e), output_error=True)
    return _status(args.status, res.code, res.reason)


def _status(path: str, code: int, reason: str, policy_error: bool = False,
            output_error: bool = False) -> int:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"code": code, "reason": reason, "policy_error": policy_error,
                   "output_error": output_error}, fh)
    return code


if __name__ == "__main__":
    sys.exit(main())
