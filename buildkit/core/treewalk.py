"""Walking and removing a folder tree of any depth: with a stack, never by recursion.

Python 3.11's own walkers recurse once per level (`Path.rglob`, `os.walk`, `shutil.rmtree`): a tree of
1,200 nested folders (a fork's tree, an image's root file system, a wheel's members) raised RecursionError
in each, and a cleanup that raised it left the folder it was removing behind. `walk` and `remove_tree` keep
their own stack (a list), so a tree is limited by what the file system allows (PATH_MAX), not by Python's
recursion limit.

Neither follows a symlink: a link to a folder is an entry (`walk` lists it with the files; `remove_tree`
unlinks the link, never what it points to). `remove_tree` works by path (lstat, then unlink or rmdir), for
folders buildkit made itself, so another process replacing a folder by a link while it runs is not in its
threat model (shutil.rmtree's descriptor-based walk would guard that, at a recursion per level).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path


def walk(top: Path | str, *,
         onerror: Callable[[OSError], None] | None = None) -> Iterator[tuple[Path, list[str], list[str]]]:
    """(folder, subfolder names, other names) for top and every folder below it, top-down, as os.walk
    gives them (names in the order the file system lists them; a subfolder a caller removes from its list
    is not entered). Symlinks are never followed: a link, to a folder too, is among the other names (os.walk
    lists a link to a folder with the folders). An unreadable folder is skipped (onerror gets its OSError)."""
    stack = [Path(top)]
    while stack:
        folder = stack.pop()
        folders: list[str] = []
        others: list[str] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        is_folder = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_folder = False
                    (folders if is_folder else others).append(entry.name)
        except OSError as exc:
            if onerror is not None:
                onerror(exc)
            continue
        yield folder, folders, others
        stack.extend(folder / name for name in reversed(folders))


def files_below(top: Path | str) -> Iterator[Path]:
    """Every entry below top that is not a folder (regular files, symlinks, devices...), never following a
    symlink; in no particular order (callers sort)."""
    for folder, _, others in walk(top):
        for name in others:
            yield folder / name


def remove_tree(path: Path | str, *, ignore_errors: bool = False) -> None:
    """Remove path and everything below it (a file or a symlink is unlinked). OSError on the first thing
    that cannot be removed, unless ignore_errors (then as much as can be goes). Missing path: nothing."""
    root = Path(path)
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):
            os.unlink(root)
            return
    except FileNotFoundError:
        return
    except OSError:
        if ignore_errors:
            return
        raise
    # (folder, entered): a folder is entered once (its non-folders unlinked, its subfolders stacked above
    # it) and removed when it comes up again, after everything above it in the stack is gone
    stack: list[tuple[Path, bool]] = [(root, False)]
    while stack:
        folder, entered = stack.pop()
        try:
            if entered:
                os.rmdir(folder)
                continue
            stack.append((folder, True))
            with os.scandir(folder) as entries:
                names = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
            for name, is_folder in names:
                if is_folder:
                    stack.append((folder / name, False))
                else:
                    try:
                        os.unlink(folder / name)
                    except FileNotFoundError:
                        pass
                    except OSError:
                        if not ignore_errors:
                            raise
        except FileNotFoundError:
            continue
        except OSError:
            if not ignore_errors:
                raise
