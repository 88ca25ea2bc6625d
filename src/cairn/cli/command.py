"""One ``cairn`` subcommand: its name, its arguments and its handler, declared together.

Each command module (:mod:`~cairn.cli.checkpoints`, :mod:`~cairn.cli.train`,
:mod:`~cairn.cli.evaluate`, :mod:`~cairn.cli.plot`) declares its :class:`Command`
values beside their handlers; :data:`cairn.cli.COMMANDS` lists them all, and the
parser is built from that one table. Handlers import their heavy dependencies
(torch, gymnasium, matplotlib) inside, so that building every parser stays cheap.
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["USAGE_STATUS", "Command", "UsageError", "did_you_mean", "require_folder", "sibling_hint"]

USAGE_STATUS = 2
"""The exit status of a command line the command cannot run (argparse's own, for every command)."""


class UsageError(ValueError):
    """The command line asks for something the command cannot do (a file where a folder is expected,
    ``--iterations`` below a resumed run's iteration, ...): one line on stderr, exit :data:`USAGE_STATUS`.

    A ``ValueError`` like the other errors of the user's input, so that code calling
    :func:`cairn.cli.main` in-process catches it the same way.
    """


@dataclass(frozen=True)
class Command:
    """A subcommand of ``cairn``.

    Attributes:
        name: What the user types (``cairn NAME ...``).
        help: The one line ``cairn --help`` shows for it.
        add_arguments: Adds the command's arguments to its parser.
        run: The handler: takes the parsed arguments, returns the exit status.
        description: The longer text of ``cairn NAME --help`` (the help line when None).
        error_status: The exit status when the handler fails with an error. ``verify``
            and ``diff`` use 2, since 1 means "broken" or "different" there, as diff(1) does.
        examples: Command lines shown under "examples:" in ``cairn NAME --help``, each a
            line (a ``#`` comment may follow).
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None
    error_status: int = 1
    examples: tuple[str, ...] = ()


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 3) -> str:
    """`` (did you mean X?)`` with the closest of ``choices`` to ``word``, or ``""`` when none is close.

    Close means difflib's ratio of at least 0.6, compared without case (``cartpole-v1``
    finds ``CartPole-v1``), so that a typo gets its correction and nothing else does.
    """
    by_folded: dict[str, str] = {}
    for choice in choices:
        by_folded.setdefault(choice.casefold(), choice)
    close = difflib.get_close_matches(word.casefold(), list(by_folded), n=n, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(by_folded[c] for c in close)}?)"


def sibling_hint(path: str) -> str:
    """`` (did you mean X?)`` with the folders beside the missing local ``path`` that are close to its name.

    A mistyped folder (``runs/cartpol``) gets its correction from what is there; a remote
    path (``s3://...``) gets ``""``: listing a bucket to guess is not worth its cost.
    """
    if "://" in path:
        return ""
    parent = os.path.dirname(os.path.abspath(path))
    siblings = [e.name for e in os.scandir(parent) if e.is_dir()] if os.path.isdir(parent) else []
    return did_you_mean(os.path.basename(os.path.normpath(path)), siblings)


def require_folder(path: str, *, what: str = "checkpoint") -> None:
    """Raise :class:`UsageError` when the local ``path`` is a file: a checkpoint is a folder.

    Only local paths are checked here (an object store has no files standing for folders);
    a missing path is left to the reader, whose error says it is missing.
    """
    if "://" in path or not os.path.isfile(path):
        return
    hint = ""
    if what == "checkpoint" and os.path.basename(path) in ("manifest.json", "metadata.json"):
        hint = f"; the checkpoint is the folder holding it: {os.path.dirname(path) or '.'}"
    raise UsageError(f"{path} is a file, and a {what} is a folder{hint}.")
