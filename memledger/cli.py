"""The `memledger` command. Verbs live in memledger/commands/, one module each; errors are
turned into one line and an exit code here and nowhere else."""

from __future__ import annotations

import sys

import typer

from memledger.commands import (
    check,
    compare,
    diff,
    doctor,
    export,
    import_,
    measure,
    plan,
    predict,
    report,
    show,
    trace,
)
from memledger.commands.common import err_console
from memledger.commands.help import HelpGroup, version_option
from memledger.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, MemledgerError

app = typer.Typer(
    name="memledger",
    help="Where the memory of a PyTorch training step goes, and what to do about it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=HelpGroup,
)
app.callback()(version_option)
# The order of `memledger --help`: record, look, what-if, for real, CI, pictures and files.
app.command()(trace.trace)
app.command()(show.show)
app.command()(predict.predict)
app.command()(measure.measure)
app.command()(doctor.doctor)
app.command()(compare.compare)
app.command()(plan.plan)
app.command()(check.check)
app.command()(report.report)
app.command()(export.export)
app.command(name="import")(import_.import_)
app.command()(diff.diff)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 1 check failed, 2 bad input, 3 script failed,
    70 a bug in memledger: one line, the traceback in a file it names; 130 interrupted)."""
    from memledger.commands.common import JSON_PRINTED

    JSON_PRINTED[0] = False
    args = sys.argv[1:] if argv is None else argv
    args = args[:args.index("--")] if "--" in args else args   # the script's own flags

    def json_error(code: int, message: str) -> None:
        # a CI step parsing stdout gets one JSON document whatever happened, not an empty
        # input (the verdict, when printed, is that document); a usage error too
        if "--json" in args and not JSON_PRINTED[0]:
            import json

            print(json.dumps({"ok": False, "exit_code": code,
                              "error": message.removeprefix("memledger: ")}))

    try:
        rv = app(args=argv, prog_name="memledger", standalone_mode=False)
    except MemledgerError as e:
        err_console.print(str(e), markup=False, style="red", soft_wrap=True)
        json_error(e.exit_code, str(e))
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("memledger: interrupted", style="red")
        return EXIT_INTERRUPTED
    except Exception as e:
        # Usage errors: click's ClickException (typer < 0.20 uses click, later typer vendors
        # it), matched by shape so either works.
        if hasattr(e, "show") and hasattr(e, "exit_code"):
            e.show()
            json_error(EXIT_USAGE, e.format_message() if hasattr(e, "format_message")
                       else str(e))
            return EXIT_USAGE
        from memledger.crash import crash_line, environment_error

        env = environment_error(e)  # a full disk is not a bug: exit 2, one line
        if env is not None:
            err_console.print(str(env), markup=False, style="red", soft_wrap=True)
            return env.exit_code
        # a bug: one line, the traceback in a file it names
        err_console.print(crash_line(e), markup=False, style="red", soft_wrap=True)
        return EXIT_INTERNAL
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
