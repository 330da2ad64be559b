"""A kernel's byte loads in SASS: `cuobjdump -sass` of a library, read for one kernel (tests only).

cuobjdump disassembles through nvdisasm, which no toolkit wheel that buildkit lays out carries; it
comes from NVIDIA's own PyPI wheel (nvidia-cuda-nvdisasm), fetched once into the tests' cache.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llama-buildkit-tests" / "nvdisasm"
WHEEL = "nvidia-cuda-nvdisasm==13.*"
LOAD = re.compile(r"\bLD(?:G|S|C)?(?:\.[A-Z0-9]+)*\.([SU]8)\b")


def nvdisasm_dir() -> Path:
    """The folder of an x86-64 nvdisasm (downloaded with pip the first time)."""
    found = CACHE / "bin" / "nvdisasm"
    if found.is_file():
        return found.parent
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform",
                    "manylinux2014_x86_64", "--python-version", "3.11", "--disable-pip-version-check", "-q",
                    "-d", str(CACHE), WHEEL], check=True, capture_output=True)
    wheel = sorted(CACHE.glob("nvidia_cuda_nvdisasm-*.whl"))[-1]
    with zipfile.ZipFile(wheel) as z:
        data = z.read(next(n for n in z.namelist() if n.endswith("/bin/nvdisasm")))
    found.parent.mkdir(exist_ok=True)
    tmp = found.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o755)
    tmp.replace(found)
    return found.parent


def byte_loads(cuobjdump: str, library: Path, kernel: str) -> set[str]:
    """The kinds of byte load ({'S8'} signed, {'U8'} unsigned) in every cubin's SASS of `kernel`."""
    env = dict(os.environ, PATH=f"{nvdisasm_dir()}{os.pathsep}{os.environ.get('PATH', '')}")
    out = subprocess.run([cuobjdump, "-sass", str(library)], capture_output=True, text=True, env=env,
                         timeout=300, check=True).stdout
    kinds: set[str] = set()
    for block in re.split(r"\n\s*Function : ", out)[1:]:
        if kernel in block.split("\n", 1)[0]:
            kinds |= set(LOAD.findall(block))
    assert kinds, f"no byte load of {kernel} in the SASS of {library.name}"
    return kinds
