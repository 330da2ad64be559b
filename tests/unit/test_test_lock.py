"""The locked test environment (issue 47, item 2): requirements/test-lock.txt, written by `make lock` (pip-tools'
pip-compile --generate-hashes), pins every package `make install` puts in the test environment, with hashes.

What is checked here, without a network: each requirement of pyproject.toml (its dependencies, its test extra,
its build system) is pinned with `==` to a version its specifier allows, and every pin carries sha256 hashes
(pip's hash-checking mode refuses a requirement without one). A dependency added to pyproject without
`make lock` fails here, not at a fresh machine's `make setup`.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "test-lock.txt"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def pins(text: str) -> dict[str, tuple[str, int]]:
    """{name: (version, hashes)} of a pip-compile output: `name==version \\` then `--hash=sha256:...` lines."""
    found: dict[str, tuple[str, int]] = {}
    current = ""
    for line in text.splitlines():
        if match := PIN.match(line):
            current = canonicalize_name(match.group(1))
            found[current] = (match.group(2), 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, count = found[current]
            found[current] = (version, count + 1)
    return found


def requirements() -> list[Requirement]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    texts = [*data["project"]["dependencies"], *data["project"]["optional-dependencies"]["test"],
             *data["build-system"]["requires"]]
    return [Requirement(text) for text in texts]


def test_the_reader_sees_names_versions_and_hashes():
    text = ("# comment\nclick==8.5.1 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n    # via x\n"
            "PyYAML==6.0.4 \\\n    --hash=sha256:cc\nbare==1\n")
    assert pins(text) == {"click": ("8.5.1", 2), "pyyaml": ("6.0.4", 1), "bare": ("1", 0)}


def test_every_requirement_is_pinned_with_hashes_to_a_version_it_allows():
    locked = pins(LOCK.read_text())
    missing = [str(r) for r in requirements() if canonicalize_name(r.name) not in locked]
    assert missing == [], "in pyproject.toml, not in the lock: run make lock"
    outside = [f"{r} (locked {locked[canonicalize_name(r.name)][0]})" for r in requirements()
               if Version(locked[canonicalize_name(r.name)][0]) not in r.specifier]
    assert outside == [], "the lock pins a version pyproject.toml does not allow: run make lock"
    unhashed = sorted(name for name, (_, hashes) in locked.items() if hashes == 0)
    assert unhashed == [], "pinned without a hash: pip's --require-hashes refuses the whole lock"


def test_make_install_installs_the_lock_in_hash_checking_mode():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ninstall:\n", 1)[1].split("\n\n", 1)[0]
    assert "--require-hashes --requirement $(LOCK)" in recipe and "LOCK = requirements/test-lock.txt" in makefile
    assert "--no-deps" in recipe  # buildkit itself adds nothing the lock does not hold
