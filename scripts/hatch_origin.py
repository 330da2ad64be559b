"""Hatchling's build hook for the wheel: it records where it was built from (issue 47, item 3).

A wheel installed from a file (`make dist`, then `pip install dist/llama_buildkit-*.whl`) has no git URL in pip's
record of the install (PEP 610 gives it `archive_info` only), so `buildkit ci github` could not pin the commit a
runner should install. This hook writes buildkit/_origin.json into the wheel: the commit of the checkout it was
built from, whether the work tree had uncommitted changes, and each remote with whether one of its
remote-tracking branches holds the commit (credentials taken out of the URLs). Read back by
buildkit/flows/nightly/installorigin.py, with the same facts as a checkout read at run time (its checkout_facts).

Nothing is recorded for an editable install (the checkout itself runs, and is read at run time) or for a build
outside a git checkout (an sdist's).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class OriginHook(BuildHookInterface):  # type: ignore[misc]  # (hatchling ships no types)
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        sys.path.insert(0, self.root)
        try:
            from buildkit.flows.nightly.installorigin import ORIGIN_FILE, checkout_facts
        finally:
            sys.path.remove(self.root)
        facts = checkout_facts(Path(self.root))
        if facts is None:
            return
        self._folder = Path(tempfile.mkdtemp(prefix="buildkit-origin-"))
        record = {"commit": facts.commit, "dirty": facts.dirty, "built_from": self.root,
                  "remotes": [asdict(r) for r in facts.remotes]}
        path = self._folder / ORIGIN_FILE
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        build_data["force_include"][str(path)] = f"buildkit/{ORIGIN_FILE}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        folder = getattr(self, "_folder", None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
