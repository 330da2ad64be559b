"""Text from elsewhere shown safely (core/printable.py, issue 48 item 7): no sequence a terminal acts on is ever
printed raw, and a Markdown table cell stays one cell of plain text."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildkit.core.printable import markdown_cell, markdown_code, printable

# What a hostile case name, reason phrase or file may carry, as the terminal would take it
SEQUENCES = {
    "OSC title": "\x1b]0;owned\x07",
    "OSC 52 clipboard": "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07",
    "DCS": "\x1bP1$r0m\x1b\\",
    "C1 CSI": "\x9b31m",
    "C1 OSC": "\x9d0;owned\x9c",
    "alternate screen": "\x1b[?1049h",
    "clear": "\x1b[2J\x1b[H",
    "bidi override": "\u202eevil\u202c",
    "carriage return": "ok\rFAIL",
    "line separator": "a\u2028b",
}


@pytest.mark.parametrize("name", SEQUENCES)
def test_no_control_sequence_reaches_the_terminal(name):
    shown = printable(f"ARGMAX{SEQUENCES[name]}(type=f32)")
    assert shown.isprintable() and shown.startswith("ARGMAX") and shown.endswith("(type=f32)")
    assert not any(ch in shown for ch in "\x1b\x07\x9b\x9c\x9d\u202e\u202c\r\u2028")


def test_what_was_sent_is_shown_as_its_escape():
    assert printable("\x1b]0;t\x07") == "\\x1b]0;t\\x07"
    assert printable("\x9b2J \u202e") == "\\x9b2J \\u202e"
    assert printable("a\nb") == "a\\nb" and printable("a\nb", keep_newlines=True) == "a\nb"
    assert printable("tab\tin\r") == "tab\\tin\\r" and printable("\x00\x7f") == "\\x00\\x7f"


def test_ordinary_text_is_left_as_it_is():
    for text in ("ARGMAX(type=f32,ne=[32,513,1,1])", "über 5 µs — “quoted”", "日本語", "a\u00a0b", ""):
        assert printable(text) == text


def test_a_table_cell_is_plain_text_of_one_cell():
    cell = markdown_cell("A|B <img src=x onerror=alert(1)> &lt; `code` *x* [l](u) \x1b[2J\nnext")
    assert "|" not in cell.replace("\\|", "") and "\n" not in cell
    assert "<" not in cell.replace("\\<", "") and "&" not in cell.replace("\\&", "")
    assert "`" not in cell.replace("\\`", "") and "\x1b" not in cell
    assert markdown_cell("ARGMAX(type=f32)") == "ARGMAX\\(type\\=f32\\)"


def test_a_code_span_cell_escapes_its_pipes_and_outfences_its_backticks():
    assert markdown_code("ARGMAX(type=f32,ne=[32,513,1,1])") == "`ARGMAX(type=f32,ne=[32,513,1,1])`"
    assert markdown_code("a|b <img src=x>") == "`a\\|b <img src=x>`"
    assert markdown_code("x``y`") == "``` x``y` ```" and markdown_code("\x1b[2J\n") == "`\\x1b[2J\\n`"


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.text())
def test_anything_is_one_printable_line_and_printing_twice_changes_nothing(text):
    shown = printable(text)
    assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in shown)
    assert "\n" not in shown and "\x1b" not in shown and printable(shown) == shown
    cell = markdown_cell(text)
    assert "\n" not in cell and all(cell[i - 1] == "\\" for i, ch in enumerate(cell) if ch in "|<>&`")
