"""The ``cairn`` command line (the ``cairn`` executable and ``python -m cairn``).

Every subcommand is one :class:`~cairn.cli.command.Command` of :data:`COMMANDS`:
its parser and its handler are declared together in its module
(:mod:`~cairn.cli.checkpoints`: inspect, verify, sign, diff, extract, ls, upgrade,
convert; :mod:`~cairn.cli.train`; :mod:`~cairn.cli.evaluate`; :mod:`~cairn.cli.plot`),
and ``cairn --help`` lists them all. Adding a command: write its handler and its
arguments, declare its ``Command`` beside them, and add it to :data:`COMMANDS`.

Errors print one line on stderr (a traceback only with ``--debug``) and exit
non-zero; ``verify`` and ``diff`` exit 0 when sound/equal, 1 when broken/
different, and 2 when they could not check, as diff(1) does. Every string that
comes from a file or the user is printed through :func:`cairn._display.safe_text`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from cairn._display import safe_text
from cairn.cli import checkpoints, deploy, evaluate, plot, train
from cairn.cli.command import Command
from cairn.errors import CheckpointError

__all__ = ["COMMANDS", "Command", "build_parser", "console_main", "main"]

COMMANDS: tuple[Command, ...] = (*checkpoints.COMMANDS, train.COMMAND, evaluate.COMMAND, *deploy.COMMANDS, plot.COMMAND)
"""Every subcommand of ``cairn``, in the order ``cairn --help`` lists them."""

_BY_NAME = {command.name: command for command in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cairn``: the global options and one subparser per command of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(prog="cairn", description="Safe, verified checkpoints for RL.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (the package of your own components, for from_checkpoint and upgrade)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.description or command.help)
        command.add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cairn`` command: parse ``argv`` (default ``sys.argv[1:]``), run, return the exit status."""
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    command = _BY_NAME[args.command]
    try:
        for module in args.imports:
            importlib.import_module(module)
        return command.run(args)
    except KeyboardInterrupt:
        print("cairn: interrupted", file=sys.stderr)
        return 130
    except ImportError as err:
        if args.debug:
            raise
        print(
            f"cairn {command.name}: error: cannot import {safe_text(err.name or err)}: {safe_text(err)}",
            file=sys.stderr,
        )
        return command.error_status
    except (CheckpointError, OSError, ValueError, RecursionError) as err:
        # RecursionError: the last net under every reader of user input (each names its
        # file and line itself); never a traceback without --debug (SPEC 7).
        if args.debug:
            raise
        print(f"cairn {command.name}: error: {safe_text(err)}", file=sys.stderr)
        return command.error_status


def console_main() -> NoReturn:
    """The ``cairn`` executable and ``python -m cairn``: :func:`main`, then exit with its status.

    Before exiting, every object alive is moved out of the garbage collector's reach
    (``gc.freeze``). With torch loaded, the interpreter's last collections walk its
    hundreds of thousands of objects: 0.4-0.8 s of a ~2 s ``cairn evaluate`` (0.8-1 s after
    ``cairn train``) on a busy 2-core machine, 0.1-0.25 s frozen. Nothing else of the exit
    changes: atexit handlers (Ray's shutdown), the joining of non-daemon threads and the
    flushing of stdout and stderr still run, and the files cairn writes were closed
    explicitly before :func:`main` returned. Only for a process that ends here: called
    in-process (tests, other programs), use :func:`main`.
    """
    status = main()
    gc.freeze()
    sys.exit(status)
