"""What cairn logged, read in tests: the warnings of fallbacks, re-copies and retries (docs/cli.md, "Logging")."""

from __future__ import annotations

import logging
import re

import pytest


def warned(caplog: pytest.LogCaptureFixture, pattern: str = "") -> list[str]:
    """The messages of the warnings on ``cairn`` loggers that ``caplog`` caught and ``pattern`` finds (re.search)."""
    return [
        record.getMessage()
        for record in caplog.records
        if (record.name == "cairn" or record.name.startswith("cairn."))
        and record.levelno == logging.WARNING
        and re.search(pattern, record.getMessage())
    ]
