"""Prototype patches of cairn, applied by ``python -m bench --proto`` to measure proposed changes."""


def apply() -> None:
    pass
