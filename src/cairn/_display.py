"""Text from checkpoints and user files, made safe to print on a terminal.

A checkpoint can come from anyone (SPEC 8), and its class names, tensor names,
component names, ``created`` stamps and metric names reach the screen through
``cairn inspect``, ``ls``, ``diff``, ``verify`` and error messages that quote
them. Printed raw, an escape sequence in one of them retitles the terminal,
clears the screen, writes the clipboard (OSC 52) or reorders what is shown
(bidi overrides). Every printer of the command line passes such text through
:func:`safe_text`, the one place of this rule; ``--json`` output is escaped by
the JSON encoder instead.
"""

from __future__ import annotations

__all__ = ["safe_text"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def safe_text(value: object) -> str:
    """``str(value)`` with every character a terminal could act on shown as an escape.

    Escaped, as Python writes them in a string literal (``\\x1b``, ``\\n``,
    ``\\u202e``): C0 controls (newlines and tabs included: one value never spans
    lines or forges a line of its own), DEL, C1 controls (``\\x9b`` is a CSI on
    some terminals), format characters (the bidi overrides U+202A-U+202E and
    isolates U+2066-U+2069, zero-width characters), separators other than the
    space, unassigned and private-use code points, and lone surrogates (a file
    name that is not UTF-8), which could not even be encoded for output. Other
    text, non-ASCII letters included, is unchanged; ANSI CSI and OSC sequences
    lose their ESC or C1 introducer and so their effect.
    """
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escaped(char) for char in text)
