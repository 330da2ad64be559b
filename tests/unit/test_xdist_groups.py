"""The engine tier keeps a module's tests on one pytest-xdist worker (`--dist loadgroup`, tests/conftest.py), so
the builds its module fixtures share are made once. pytest 9.2.0 broke that with every pytest-xdist (the tests of
one module ran on both workers; 9.1.1 kept them together), so the test extra holds pytest below 9.2: this test
fails with the versions that spread a group, in `make test` and in `make test-latest` alike."""

from __future__ import annotations

import re
import subprocess
import sys


def test_a_modules_tests_stay_on_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.hookimpl(tryfirst=True)\ndef pytest_collection_modifyitems(items):\n"
        "    for item in items:\n        item.add_marker(pytest.mark.xdist_group(item.path.name))\n")
    for name in ("test_one.py", "test_two.py"):
        (tmp_path / name).write_text("".join(f"def test_{i}():\n    pass\n\n\n" for i in range(6)))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
                           "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    workers: dict[str, set[str]] = {}
    for worker, module in re.findall(r"^\[(gw\d+)\].*?PASSED \S*?(test_\w+\.py)::", proc.stdout, re.M):
        workers.setdefault(module, set()).add(worker)
    assert set(workers) == {"test_one.py", "test_two.py"}, proc.stdout[-2000:]
    assert all(len(w) == 1 for w in workers.values()), f"a module's tests ran on several workers: {workers}"
