"""`buildkit config` names the CPU level and where it came from (the real CLI in a subprocess).
The pure CPU-level planning is tested in tests/unit/test_cpulevels.py."""

from __future__ import annotations

import json
import re


def test_buildkit_config_shows_the_level_and_where_it_came_from(cli):
    out = cli("config").stdout
    assert re.search(r"^build\.cpu_level\s+all\s+\(default; LLAMA_BUILDKIT_BUILD_CPU_LEVEL\)", out, re.M), out
    out = cli("config", "--cpu-level", "x86-64-v3").stdout
    assert re.search(r"^build\.cpu_level\s+x86-64-v3\s+\(--cpu-level;", out, re.M), out
    data = json.loads(cli("config", "--json", LLAMA_BUILDKIT_BUILD_CPU_LEVEL="none").stdout)
    assert data["build.cpu_level"] == {"value": "none", "origin": "env LLAMA_BUILDKIT_BUILD_CPU_LEVEL"}
    bad = cli("config", "--cpu-level", "avx9")
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and "build.cpu_level must be one of" in bad.stderr
