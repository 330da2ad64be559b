"""The wheel ships templates/ and patches/ inside the package, where buildkit.paths finds them."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_templates_and_patches(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    wheel, = tmp_path.glob("llama_buildkit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for template in (ROOT / "templates").glob("*.j2"):
        assert f"buildkit/templates/{template.name}" in names
    assert any(n.startswith("buildkit/bundled_patches/") for n in names)
    assert "buildkit/cli/main.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "buildkit = buildkit.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
