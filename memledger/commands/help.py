"""What `memledger --help` and `memledger --version` say, shared by every verb."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup


class HelpGroup(TyperGroup):
    """The verbs' help names what to type rather than Python types.

    Typer labels a repeatable argument `<list[str]>` and a flag `<bool>`; a user types the
    script's own arguments after `--`, and a flag takes no value. A number with bounds it
    labels `<int range> [1<=x<=1024]`: that column took 24 of 80 characters and left each
    description ~23, so `trace --help` ran to 80 lines; the label is `<int>` and the bounds
    go at the end of the description. Applied once to every verb (those added later too),
    so no verb has to remember it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for cmd in [self, *getattr(self, "commands", {}).values()]:
            if cmd is not self and cmd.help:
                # Rich keeps a docstring's line breaks inside a paragraph: at 80 columns a
                # paragraph wrapped at 88 in the source read "the token" / "denominator"
                cmd.help = _reflowed(cmd.help)
                cmd.short_help = cmd.short_help or cmd.help.split("\n\n")[0]
            for param in cmd.params:
                if param.metavar is not None:
                    continue
                if param.param_type_name == "argument" and param.nargs == -1:
                    param.display_type_rich = _script_args_label  # instance attribute
                elif getattr(param, "is_flag", False):
                    param.metavar = ""   # `--json`, `--measure/--no-measure`: no value
                elif getattr(param, "multiple", False):   # `--policy P --policy Q`
                    param.metavar = (param.name or "value").upper().rstrip("_")
                elif _number_range(param):
                    _bounds_in_help(param)

    # `--help` is not among `params`: Click makes it on first use (and caches it), so it is
    # labelled here, for the group and for each verb as the group hands it out.
    def get_help_option(self, ctx: Any) -> Any:
        return _no_value(super().get_help_option(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            _no_value(cmd.get_help_option(ctx))
        return cmd


def _reflowed(text: str) -> str:
    """Each paragraph of `text` on one line, for Rich to wrap at the terminal's width; a
    paragraph with a line that starts a list item or is indented keeps its lines."""
    paragraphs = [p.strip("\n") for p in text.split("\n\n")]
    return "\n\n".join(
        p if any(ln.startswith((" ", "-", "*", "\b")) for ln in p.splitlines())
        else " ".join(p.split()) for p in paragraphs)


def _number_range(param: Any) -> bool:
    """A number option with bounds (Typer's `min=`/`max=`)."""
    try:
        return bool(param._get_number_range_help_str())
    except Exception:         # another Typer: its own label stays
        return False


def _bounds_in_help(param: Any) -> None:
    """`<int>` in the type column, `(1 to 1024)` after the description."""
    lo, hi = getattr(param, "min", None), getattr(param, "max", None)
    bounds = (f"{lo} to {hi}" if lo is not None and hi is not None else
              f"at least {lo}" if lo is not None else f"at most {hi}")
    label = str(param.display_type_rich(ctx=None)).replace(" range", "")
    param.display_type_rich = lambda ctx=None: label   # instance attributes, as above
    param._get_number_range_help_str = lambda: ""
    param.help = f"{param.help or ''} ({bounds})".strip()


def _no_value(option: Any) -> Any:
    """A flag's metavar: empty (Typer would print `<bool>`)."""
    if option is not None and option.metavar is None:
        option.metavar = ""
    return option


def _script_args_label(ctx: Any = None) -> str:
    return "-- ARGS..."


def _print_version(value: bool) -> None:
    if value:
        from memledger import __version__

        typer.echo(f"memledger {__version__}")
        raise typer.Exit(0)


def version_option(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="print memledger's version and exit")] = False,
) -> None:
    """Where the memory of a PyTorch training step goes, and what to do about it."""
