"""Text that came from elsewhere (a registry's reason phrase, a package index, a tool's log, a file), made
safe to show (pure): on a terminal, and in a GitHub Markdown table.

`printable` writes every character a terminal would act on instead of showing as its escape (`\\x1b`,
`\\x9b`, `\\u202e`): the C0 controls (ESC starts the OSC, DCS and CSI sequences that set a window's title,
write the clipboard (OSC 52) or switch to the alternate screen), DEL, the C1 controls (U+009B is a CSI on
its own, U+0090 a DCS, U+009D an OSC), the format characters (bidirectional overrides that reorder what is
shown, zero-width characters), line and paragraph separators, and lone surrogates. The result is one line
(a line break is `\\n` too, unless kept) and shows what was sent, never what it would do. Applying it
twice gives the same text.

`markdown_cell` makes text one cell of a GitHub-flavoured Markdown table: printable, one line, and every
ASCII punctuation character backslash-escaped (CommonMark: an escaped punctuation character is literal),
so `|` never ends the cell, `<b>` or `<img src=...>` is never HTML, `&lt;` never an entity and `*`, `_`,
`` ` ``, `[` never formatting or a link. `markdown_code` makes it a code span instead (a case name shown as
code): only its `|` needs escaping there, and its fence is longer than any run of backticks it holds.
"""

from __future__ import annotations

import re
import string
import unicodedata

_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_PUNCTUATION = frozenset(string.punctuation)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """text with every character a terminal acts on written as its escape; line breaks kept when asked."""
    if text.isprintable():  # the common case: nothing to do (str.isprintable is False for all of the above)
        return text
    out = []
    for ch in text:
        if ch == "\n" and keep_newlines:
            out.append(ch)
        elif ch.isprintable() or unicodedata.category(ch) not in _ESCAPED_CATEGORIES:
            out.append(ch)  # a space, or a character str.isprintable calls unprintable that a terminal shows
        else:
            out.append(_escape(ch))
    return "".join(out)


def markdown_cell(text: str) -> str:
    """text as the literal content of one cell of a GitHub Markdown table (see the module's docstring)."""
    return "".join("\\" + ch if ch in _PUNCTUATION else ch for ch in printable(text))


def markdown_code(text: str) -> str:
    """text as a code span that is one cell of a GitHub Markdown table, or inline: printable, one line, its `|`
    escaped (GitHub splits a row before it reads code spans), fenced by more backticks than it holds (nothing
    inside a code span is HTML or formatting)."""
    shown = printable(text).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", shown)), default=0) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"
