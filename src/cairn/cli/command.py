"""One ``cairn`` subcommand: its name, its arguments and its handler, declared together.

Each command module (:mod:`~cairn.cli.checkpoints`, :mod:`~cairn.cli.train`,
:mod:`~cairn.cli.evaluate`, :mod:`~cairn.cli.plot`) declares its :class:`Command`
values beside their handlers; :data:`cairn.cli.COMMANDS` lists them all, and the
parser is built from that one table. Handlers import their heavy dependencies
(torch, gymnasium, matplotlib) inside, so that building every parser stays cheap.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Command"]


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
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None
    error_status: int = 1
