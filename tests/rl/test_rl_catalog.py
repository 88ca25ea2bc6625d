"""One algorithm table (cairn.rl.algorithms.catalog): cairn.rl's lazy names and the CLI's --algo read it."""

from __future__ import annotations

import pytest

import cairn.rl
from cairn.registry import class_path
from cairn.rl.algorithms.catalog import ALGORITHMS, algorithm_of_class


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_entry_loads_its_classes_and_cairn_rl_serves_them(name: str) -> None:
    entry = ALGORITHMS[name]
    algorithm, config = entry.load()
    assert (algorithm.__name__, config.__name__) == (entry.algorithm, entry.config)
    for public, home in entry.homes().items():
        value = getattr(cairn.rl, public)
        assert public in cairn.rl.__all__ and value.__module__ == home
    assert cairn.rl.__getattr__(entry.algorithm) is algorithm
    assert algorithm_of_class(class_path(algorithm)) is entry


def test_unknown_classes_belong_to_no_entry() -> None:
    assert algorithm_of_class("my_package.algos:PPO") is None
    assert algorithm_of_class("") is None


def test_the_train_command_offers_exactly_the_table() -> None:
    from cairn.cli import build_parser

    parser = build_parser()
    for name in ALGORITHMS:
        assert build_parser().parse_args(["train", "--algo", name]).algo == name
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--algo", "a2c"])
