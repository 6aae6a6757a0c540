"""Command lines for the CLI tests: a base command with some of its options replaced.

Every ``fedqr`` command refuses an option given twice (:mod:`fedqr._cli_once`), so a test
that changes one option of a base command line replaces it rather than appending it.
"""

from __future__ import annotations

__all__ = ["override"]


def override(base: list[str], extra: list[str]) -> list[str]:
    """``base`` without the options (and their values) that ``extra`` gives, then ``extra``.

    An option of ``base`` is ``--name`` followed by its value unless the next word is an
    option too (a flag); ``--name=value`` is one word."""
    given = {word.split("=", 1)[0] for word in extra if word.startswith("--")}
    out: list[str] = []
    i = 0
    while i < len(base):
        word = base[i]
        name = word.split("=", 1)[0]
        takes_value = ("=" not in word and i + 1 < len(base)
                       and not base[i + 1].startswith("--"))
        if word.startswith("--") and name in given:
            i += 2 if takes_value else 1
            continue
        out.append(word)
        i += 1
    return out + extra
