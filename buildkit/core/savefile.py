"""Writing a result at the end of a long run (a bench report, a nightly summary): when the file asked
for cannot be written, the result is kept in a file of its own in the temporary folder instead, and the
one line that says so names both, so nothing the run found is lost. The file is replaced whole
(wholefile.py): a full disk or a killed run leaves the earlier report as it was."""

from __future__ import annotations

import tempfile
from pathlib import Path

from buildkit.core.wholefile import append_text, write_whole


def write_or_keep(path: Path | str, text: str, what: str, *, append: bool = False) -> str:
    """Write (or append) text to path; "" when that worked, else one line: why not, and where it is."""
    path = Path(path)
    try:
        if append:
            append_text(path, text)
        else:
            write_whole(path, text)
        return ""
    except OSError as exc:
        why = exc.strerror or str(exc)
    try:
        fd, kept = tempfile.mkstemp(prefix="buildkit-", suffix=path.suffix or ".txt")
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        return f"{what} could not be written to {path} ({why}), nor kept elsewhere ({exc.strerror or exc})"
    return f"{what} could not be written to {path} ({why}); it is in {kept}"
