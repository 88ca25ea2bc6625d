# PYTHON_ARGCOMPLETE_OK (argcomplete completes `cairn` only in modules that carry this mark)
"""The ``cairn`` command line (the ``cairn`` executable and ``python -m cairn``).

Every subcommand is one :class:`~cairn.cli.command.Command` of :data:`COMMANDS`:
its parser and its handler are declared together in its module
(:mod:`~cairn.cli.checkpoints`: inspect, verify, sign, diff, extract, ls, upgrade,
convert; :mod:`~cairn.cli.train`; :mod:`~cairn.cli.evaluate`; :mod:`~cairn.cli.plot`),
and ``cairn --help`` lists them all. Adding a command: write its handler and its
arguments, declare its ``Command`` (with examples) beside them, and add it to :data:`COMMANDS`.

Errors print one line on stderr (a traceback only with ``--debug``) and exit
non-zero: 2 for a command line the command cannot run (argparse's own errors,
:class:`~cairn.cli.command.UsageError`), else the command's ``error_status``;
``verify`` and ``diff`` exit 0 when sound/equal, 1 when broken/different, and 2 when
they could not check, as diff(1) does. Every string that comes from a file or the
user is printed through :func:`cairn._display.safe_text`.

The library speaks through :mod:`logging` (loggers under ``"cairn"``); the command
line shows its warnings on stderr, ``-v`` its info and ``-vv`` its debug records,
``-q`` only errors.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

from cairn._display import safe_text
from cairn._version import __version__
from cairn.cli import checkpoints, deploy, evaluate, plot, train
from cairn.cli.command import USAGE_STATUS, Command, UsageError
from cairn.errors import CheckpointError
from cairn.registry import Trusted

__all__ = ["COMMANDS", "Command", "build_parser", "console_main", "main"]

COMMANDS: tuple[Command, ...] = (*checkpoints.COMMANDS, train.COMMAND, evaluate.COMMAND, *deploy.COMMANDS, plot.COMMAND)
"""Every subcommand of ``cairn``, in the order ``cairn --help`` lists them."""

_BY_NAME = {command.name: command for command in COMMANDS}

_EXAMPLES = (
    "cairn train --env CartPole-v1 --iterations 20 --checkpoint-dir runs/cp   # ~1 min on 2 cores",
    "cairn train --checkpoint-dir runs/cp --resume --iterations 40            # go on to 40",
    "cairn evaluate runs/cp --episodes 5",
    "cairn plot runs/cp",
    "cairn ls runs/cp --verify",
)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written (wrapped by :func:`_paragraphs`); each option's default shown.

    The default is appended to an option's help unless the help already says it, or the
    default is None/False/empty (an option that is off, or whose default the help explains).
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default" in text
            or not action.option_strings
            or default in (None, False, argparse.SUPPRESS)
            or (isinstance(default, list | tuple) and not default)
        ):
            return text
        return f"{text} (default: %(default)s)"


def _paragraphs(text: str) -> str:
    """``text`` wrapped to 78 columns, paragraph by paragraph (blank lines kept)."""
    return "\n\n".join(textwrap.fill(" ".join(p.split()), 78) for p in text.split("\n\n"))


def _epilog(examples: Sequence[str]) -> str | None:
    if not examples:
        return None
    return "examples:\n" + "\n".join(f"  {line}" for line in examples)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cairn``: the global options and one subparser per command of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="cairn",
        description=_paragraphs(
            "Safe, verified checkpoints for RL: train, resume, evaluate, plot, and inspect or verify "
            "checkpoints. `cairn COMMAND --help` documents each command, with examples."
        ),
        epilog=_epilog(_EXAMPLES),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"cairn {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors (and debug logs)")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log more: -v shows the library's info records (retention, resume choices), -vv its debug ones",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="log errors only (no warnings)")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (the package of your own components, for from_checkpoint and upgrade), "
        "e.g. --import mypkg.envs; repeatable",
    )
    parser.add_argument(
        "--trust",
        dest="trust",
        action="append",
        default=[],
        metavar="MODULE:NAME",
        help="allow checkpoints loaded by this command to name this class or function (as trusted=[...])",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(
            command.name,
            help=command.help,
            description=_paragraphs(command.description or command.help),
            epilog=_epilog(command.examples),
            formatter_class=_HelpFormatter,
        )
        command.add_arguments(p)
    return parser


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to the ``sys.stderr`` of the moment (tests and callers may swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.setStream(sys.stderr)
        super().emit(record)


class _LineFormatter(logging.Formatter):
    """``cairn COMMAND: warning: message``, the form of the command's own error lines.

    The message goes through ``safe_text``: it names paths and values that came from files
    and the user, which must not reach the terminal as control characters.
    """

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command

    def format(self, record: logging.LogRecord) -> str:
        text = f"cairn {self.command}: {record.levelname.lower()}: {safe_text(record.getMessage())}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


@contextmanager
def _logging(args: argparse.Namespace) -> Iterator[None]:
    """Show the ``cairn`` loggers' records on stderr at the level the options ask, for the command's time.

    Only the ``cairn`` logger is configured (never the root logger: a program calling
    :func:`main` keeps its own logging), and it is put back as it was afterwards.
    """
    if args.quiet:
        level = logging.ERROR
    elif args.debug or args.verbose >= 2:
        level = logging.DEBUG
    elif args.verbose == 1:
        level = logging.INFO
    else:
        level = logging.WARNING
    logger = logging.getLogger("cairn")
    handler = _StderrHandler()
    handler.setFormatter(_LineFormatter(args.command))
    before = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]


def _autocomplete(parser: argparse.ArgumentParser) -> None:
    """Shell completion through argcomplete when it is installed (``pip install "cairn-rl[completion]"``).

    argcomplete answers the shell and exits inside this call when the shell asks (it sets
    ``_ARGCOMPLETE``); otherwise nothing happens, so the module is imported only then.
    """
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cairn`` command: parse ``argv`` (default ``sys.argv[1:]``), run, return the exit status."""
    parser = build_parser()
    _autocomplete(parser)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    command = _BY_NAME[args.command]
    with _logging(args):
        return _run(command, args)


def _run(command: Command, args: argparse.Namespace) -> int:
    def fail(message: str, status: int) -> int:
        print(f"cairn {command.name}: error: {message}", file=sys.stderr)
        return status

    try:
        for module in args.imports:
            importlib.import_module(module)
        # The user named these on the command line: what they allow, every load of this command allows.
        from cairn.registry import register

        for obj in Trusted.from_names(args.trust).objects.values():
            register(obj)
        return command.run(args)
    except KeyboardInterrupt:
        print(f"cairn {command.name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`cairn inspect ... | head`): not an error of cairn's. Later
        # writes (the interpreter's flush at exit) go to /dev/null, so none raises again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # 128 + SIGPIPE, what a C tool's status would be
    except UsageError as err:
        if args.debug:
            raise
        return fail(safe_text(err), USAGE_STATUS)
    except ImportError as err:
        if args.debug:
            raise
        return fail(f"cannot import {safe_text(err.name or err)}: {safe_text(err)}", command.error_status)
    except (CheckpointError, OSError, ValueError, RecursionError) as err:
        # RecursionError: the last net under every reader of user input (each names its
        # file and line itself); never a traceback without --debug (SPEC 7).
        if args.debug:
            raise
        return fail(safe_text(err), command.error_status)
    except Exception as err:
        # Anything else is cairn's bug or a library's error without cairn's wording (gymnasium's,
        # torch's): still one line, naming its type, and how to see where it came from.
        if args.debug:
            raise
        message = f"{type(err).__name__}: {_first_line(err)} (run `cairn --debug {command.name} ...` for the traceback)"
        return fail(safe_text(message), command.error_status)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "(no message)"


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
