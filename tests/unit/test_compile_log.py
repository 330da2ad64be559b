"""The compile step's own shell, run by dash (Debian's /bin/sh, what RUN uses) with a stand-in cmake.

BuildKit stops a step's log at 2 MiB: the real tree's compiler warnings (which ccache repeats on each hit)
reached that a third of the way into a cold compile, and the progress, the ccache statistics and a late
compiler error were lost. The rendered step lets only Ninja's step lines through; a failed compile prints
its output from Ninja's first FAILED line on and exits non-zero.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from buildkit.plan.render import render_dockerfile
from test_plan_render import plan_for

# a stand-in for `cmake`: configure does nothing; --build prints what Ninja prints (step lines, a
# compiler's warnings, and with FAIL set a FAILED block) and exits with FAIL's status
FAKE_CMAKE = r"""#!/bin/sh
case " $* " in *" --build "*) ;; *) exit 0 ;; esac
echo "[1/3] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o"
i=0; while [ $i -lt 2000 ]; do echo "ggml.c:$i:5: warning: unused variable 'x' [-Wunused-variable]"; i=$((i+1)); done
echo "[2/3] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o"
if [ -n "$FAIL" ]; then
  echo "FAILED: src/CMakeFiles/llama.dir/llama.cpp.o"
  echo "/usr/bin/c++ -O3 -c /src/src/llama.cpp"
  echo "/src/src/llama.cpp:42:2: error: #error broken on purpose"
  echo "ninja: build stopped: subcommand failed."
  exit "$FAIL"
fi
echo "[3/3] Linking CXX executable bin/llama-server"
"""


def compile_step(tmp_path: Path) -> Path:
    """The rendered compile step (ccache off) as a script, its /build and /src under tmp_path."""
    text = render_dockerfile(plan_for(**{"build.arch": "cpu", "build.ccache": False}))
    step = next(s for s in text.split("\nRUN ") if "cmake --build" in s).split("\n#")[0]
    (tmp_path / "build").mkdir()
    script = tmp_path / "step.sh"
    script.write_text(step.replace("/build", str(tmp_path / "build")).replace("/src", str(tmp_path / "src")))
    return script


def run_step(tmp_path: Path, fail: str = "") -> subprocess.CompletedProcess:
    dash = shutil.which("dash")
    if dash is None:
        pytest.skip("dash (Debian's /bin/sh) is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cmake").write_text(FAKE_CMAKE)
    (bin_dir / "cmake").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAIL": fail}
    return subprocess.run([dash, str(compile_step(tmp_path))], env=env, capture_output=True, text=True, timeout=60)


def test_only_ninjas_step_lines_reach_the_log_and_the_warnings_are_counted(tmp_path):
    proc = run_step(tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [
        "[1/3] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o",
        "[2/3] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o",
        "[3/3] Linking CXX executable bin/llama-server",
        "compile: 2000 compiler warning lines, left out of this log"]
    assert (tmp_path / "build" / "compile.log").read_text().count("warning: ") == 2000  # kept in the stage


def test_a_failed_compile_prints_its_error_and_fails_the_step(tmp_path):
    proc = run_step(tmp_path, fail="2")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["[1/3] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o",
                         "[2/3] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o"]
    failed = lines.index("FAILED: src/CMakeFiles/llama.dir/llama.cpp.o")
    assert lines[failed - 1].startswith("the compile failed; the compiler's output from the first failure on")
    assert lines[failed + 2] == "/src/src/llama.cpp:42:2: error: #error broken on purpose"
    assert not any("warning:" in line for line in lines)
