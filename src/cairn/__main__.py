"""``python -m cairn``."""

from cairn.cli import console_main

console_main()
