"""Bench: real ggml-cuda translation units compiled the seed's way (an arm64 machine building an amd64 image)
against a native amd64 compile, and their PTX, SASS and host objects compared. Prints a table; asserts nothing.

    python bench/cuda_cross_objects.py --out docs/bench-runs/<date>-cuda-cross-objects.txt
    python bench/cuda_cross_objects.py --arch sm_120 --tus fork:argmax.cu,fork:cross-ring-interleave.cu
    python bench/cuda_cross_objects.py --compare-only        # the comparison again, from the last --work

An arm64 Mac building an amd64 CUDA image runs nvcc from NVIDIA's aarch64 wheels with Debian's
x86_64-linux-gnu-g++ as its host compiler, and buildkit adds -Xcudafe=--signed_chars -Xcicc=--signed_chars
(buildkit/plan/platforms.py cuda_char_flags). A whole emulated build of the real tree takes hours here, so
this compiles a sample of .cu files one at a time, each for one arch (-arch as llama.cpp's CMake gives for
CMAKE_CUDA_ARCHITECTURES 90-real, or 120a-real with --arch sm_120), in four ways:

* native: the x86_64 nvcc (NVIDIA's x86_64 wheels) on this amd64 machine, host compiler Debian 12's g++;
* emulated: the aarch64 nvcc under QEMU user mode in a Debian 12 arm64 root with the cross g++
  (g++-x86-64-linux-gnu), -ccbin x86_64-linux-gnu-g++ and buildkit's char flags: the seed's build;
* emulated-noflags: the same without the char flags, to show what they change;
* native-nokeep: the native compile again without --keep (a control: the other three keep nvcc's
  intermediate files to get the PTX, and this shows that --keep and the normalisation hide nothing).

The flags are llama.cpp's own: each tree is configured with CMake (no GPU needed; GGML_CUDA=ON,
Release, GGML_CUDA_NO_VMM=ON, GGML_NATIVE=OFF as buildkit builds it) and each TU's command is taken from
compile_commands.json, its includes inlined from the .rsp file. The emulated ones add what CMake adds in
buildkit's cross build (-ccbin=<cross g++>, the char flags in CMAKE_CUDA_FLAGS before -O3).

Both toolkits are NVIDIA's wheels laid out by buildkit (ensure_cuda_root, with cuBLAS: ggml-cuda includes
cublas_v2.h). QEMU is confined: the compiles run in a new user, mount and pid namespace (unshare --user
--mount --pid; ids 0-65535 mapped to themselves) with a private binfmt_misc instance (kernel 6.7 and
later), where the aarch64 handler is registered with the F flag; nothing outside that namespace sees it,
and it goes with the namespace. Both CUDA roots are bind-mounted at the same path (<work>/cuda) and the
trees and outputs are at the same paths inside the arm64 root, so all compiles see the same file names.

Compared, per TU, each variant against native:

* PTX: the .ptx that nvcc --keep leaves (the -real arch builds no PTX into the object);
* SASS: cuobjdump -sass of the object (nvdisasm from NVIDIA's nvidia-cuda-nvdisasm wheel, as tests/sass.py);
* host object: every section of the .o (code disassembled with relocations, data as hex, bss sizes,
  the symbol table), after normalising nvcc's temporary names (tmpxft_<pid>_...) and module ids; .comment
  (the host compiler's version string) is left out and reported on its own line;
* cudafe++'s host source (.cudafe1.cpp, where cudafe++ decides host templates, e.g. on
  std::is_signed<char>): without line markers (the cross g++'s system headers live elsewhere), and with
  floating literals compared by value (the aarch64 cudafe++ spells them with more digits).

The arm64 root is <work>/arm64root unless --arm64-root names one; when it lacks the cross g++ it is made:
the linux/arm64 half of the tests' configured multiarch image (docker save) if the engine has it, else
debootstrap --foreign with the second stage run in the namespace, then apt-get install g++-x86-64-linux-gnu
in it (under the private handler).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import shlex
import shutil
import struct
import subprocess
import sys
import tarfile
import threading
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

ARCHS = {"sm_90": "90-real", "sm_120": "120a-real"}
DEFAULT_TUS = "arange.cu,quantize.cu,fork:cross-ring-interleave.cu,fork:argmax.cu"
DEFAULT_TREE = "/tmp/realsrc/llama.cpp-0.3.36"
DEFAULT_FORK = "/work/.mirror/spiritbuun+buun-llama-cpp/repo"
MULTIARCH_IMAGE = "buildkit-test/debian-multiarch-configured:bookworm"
CROSS_GXX = "/usr/bin/x86_64-linux-gnu-g++"
CHAR_FLAGS = ["-Xcudafe=--signed_chars", "-Xcicc=--signed_chars"]
VARIANTS = ("native", "emulated", "emulated-noflags", "native-nokeep")
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

LOG: list[str] = []


def say(line: str = "") -> None:
    print(line, flush=True)
    LOG.append(line)


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, **kw)


# --------------------------------------------------------------------------- preparing (outside the namespace)


def cuda_roots(version: str, cache: Path) -> dict:
    from buildkit.source.cudaroot import ensure_cuda_root, read_manifest

    roots = {}
    for arch in ("x86_64", "aarch64"):
        root = ensure_cuda_root(version, cache, with_cublas=True, arch=arch)
        nvcc = next((w["version"] for w in read_manifest(root)["wheels"] if w["package"] == "nvidia-cuda-nvcc"), "?")
        roots[arch] = {"root": str(root), "nvcc": nvcc}
        say(f"  CUDA {version} {arch}: {root} (nvidia-cuda-nvcc {nvcc}, cuBLAS headers included)")
    return roots


def fork_tree(fork: str, rev: str, work: Path) -> tuple[Path, str]:
    """The fork's source tree: `fork` itself if it is one, else its commit `rev` extracted from the git
    dir (a snapshot may lack some blobs, e.g. LFS models: the files whose blobs are there)."""
    path = Path(fork)
    if (path / "ggml" / "src" / "ggml-cuda").is_dir():
        return path, "work tree"
    git = ["git", "--git-dir", str(path)]
    commit = run(git + ["rev-parse", f"{rev}^{{commit}}"], capture_output=True, text=True).stdout.strip()
    dest = work / f"fork-{commit[:12]}"
    if (dest / ".extracted").is_file():
        return dest, commit
    listing = run(git + ["ls-tree", "-r", "-z", commit], capture_output=True).stdout.split(b"\0")
    blobs = []  # (mode, id, path)
    for entry in filter(None, listing):
        meta, path = entry.split(b"\t", 1)
        mode, kind, oid = meta.decode().split()
        if kind == "blob":
            blobs.append((mode, oid, path.decode()))
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    # git archive stops at a missing blob; cat-file --batch answers "<id> missing" and goes on
    proc = subprocess.Popen(git + ["cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def feed() -> None:
        proc.stdin.write("".join(f"{oid}\n" for _, oid, _ in blobs).encode())
        proc.stdin.close()

    threading.Thread(target=feed, daemon=True).start()
    written = 0
    for mode, oid, path in blobs:
        header = proc.stdout.readline().split()
        if header[-1] == b"missing":
            continue
        data = proc.stdout.read(int(header[2]))
        proc.stdout.read(1)  # the newline after each object
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            target.symlink_to(data.decode())
        else:
            target.write_bytes(data)
            if mode == "100755":
                target.chmod(0o755)
        written += 1
    proc.wait()
    say(f"  fork {commit[:12]}: {written} of {len(blobs)} files in the snapshot (the rest are blobs it lacks), "
        f"extracted to {dest}")
    (dest / ".extracted").write_text(commit + "\n")
    return dest, commit


def arm64_root_ready(root: Path) -> bool:
    return (root / CROSS_GXX.lstrip("/")).exists() and (root / "usr/bin/apt-get").exists()


def unpack_arm64_from_image(root: Path, work: Path) -> bool:
    """The linux/arm64 half of the tests' configured multiarch image, unpacked into `root`."""
    if subprocess.run(["docker", "image", "inspect", MULTIARCH_IMAGE], capture_output=True).returncode != 0:
        return False
    say(f"  arm64 root: unpacking the linux/arm64 half of {MULTIARCH_IMAGE} (docker save)")
    saved = work / "multiarch.tar"
    run(["docker", "save", MULTIARCH_IMAGE, "-o", str(saved)])
    with tarfile.open(saved) as tar:
        def blob(digest: str) -> bytes:
            return tar.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}").read()

        node = json.loads(tar.extractfile("index.json").read())
        while "manifests" in node:  # an index, maybe nested, down to the arm64 manifest
            ms = node["manifests"]
            pick = next((m for m in ms if m.get("platform", {}).get("architecture") == "arm64"), None)
            node = json.loads(blob((pick or ms[0])["digest"]))
        root.mkdir(parents=True, exist_ok=True)
        for layer in node["layers"]:
            (work / "layer.tar.gz").write_bytes(blob(layer["digest"]))
            run(["tar", "-xzf", str(work / "layer.tar.gz"), "-C", str(root), "--numeric-owner"])
    (work / "layer.tar.gz").unlink()
    saved.unlink()
    return True


def debootstrap_first_stage(root: Path) -> None:
    from images import debian_mirror

    mirror = debian_mirror()
    say(f"  arm64 root: debootstrap --foreign --arch=arm64 --variant=minbase bookworm ({mirror})")
    run(["debootstrap", "--foreign", "--arch=arm64", "--variant=minbase", "bookworm", str(root), mirror],
        stdout=subprocess.DEVNULL)
    if (root / "proc").is_symlink():  # a mount point is needed (tests/images.py does the same)
        (root / "proc").unlink()
        (root / "proc").mkdir(mode=0o555)


# --------------------------------------------------------------------------- in the namespace


def register_private_qemu() -> None:
    """A private binfmt_misc instance (this user namespace's own) with the aarch64 handler, F flag."""
    from qemu import MAGIC

    binfmt = Path("/proc/sys/fs/binfmt_misc")
    run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)])
    seen = sorted(p.name for p in binfmt.iterdir() if p.name not in ("register", "status"))
    if seen:
        raise SystemExit(f"the new binfmt_misc instance is not empty ({seen}): not a private one; stopping")
    interpreter = shutil.which("qemu-aarch64-static")
    if not interpreter:
        raise SystemExit("qemu-aarch64-static is missing (apt-get install qemu-user-static)")
    magic, mask = MAGIC["aarch64"]
    (binfmt / "register").write_text(f":qemu-aarch64:M::{magic}:{mask}:{interpreter}:F\n")
    print(f"  [ns] private binfmt_misc: qemu-aarch64 -> {interpreter} (F), seen only in this namespace",
          flush=True)


def bind(src: str | Path, dest: Path, *, recursive: bool = False) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    run(["mount", "--rbind" if recursive else "--bind", str(src), str(dest)])


def in_root(root: Path, path: str | Path) -> Path:
    return root / str(path).lstrip("/")


def chroot_argv(root: Path, cwd: str | Path, argv: list[str], env: dict | None = None) -> list[str]:
    extra = [f"{k}={v}" for k, v in (env or {}).items()]
    return ["chroot", str(root), "/usr/bin/env", "-i", "-C", str(cwd), f"PATH={CHROOT_PATH}", "HOME=/root",
            "LC_ALL=C", *extra, *argv]


def prepare_root_inside(plan: dict) -> None:
    root = Path(plan["arm64_root"])
    if (root / "debootstrap").is_dir():  # a first stage only (the second removes /debootstrap when done)
        t = time.monotonic()
        print("  [ns] debootstrap --second-stage (arm64, under the private handler) ...", flush=True)
        run(chroot_argv(root, "/", ["/debootstrap/debootstrap", "--second-stage"], {"container": "lxc"}),
            stdout=subprocess.DEVNULL)
        print(f"  [ns] second stage done in {time.monotonic() - t:.0f}s", flush=True)
    t = time.monotonic()
    print("  [ns] apt-get install g++-x86-64-linux-gnu in the arm64 root (under QEMU) ...", flush=True)
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    apt = ["apt-get", "-q"]
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    run(chroot_argv(root, "/", apt + ["update"], env), stdout=subprocess.DEVNULL)
    run(chroot_argv(root, "/", apt + ["install", "-y", "--no-install-recommends", "g++-x86-64-linux-gnu",
                                      "binutils"], env), stdout=subprocess.DEVNULL)
    print(f"  [ns] arm64 root ready in {time.monotonic() - t:.0f}s", flush=True)


def configure(tree: str, build: Path, cuda: Path, cmake_arch: str) -> list[dict]:
    shutil.rmtree(build, ignore_errors=True)
    argv = ["cmake", "-S", tree, "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DGGML_CUDA=ON",
            f"-DCMAKE_CUDA_ARCHITECTURES={cmake_arch}", "-DGGML_CUDA_NO_VMM=ON", "-DGGML_NATIVE=OFF",
            "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF",
            "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
            f"-DCMAKE_CUDA_COMPILER={cuda}/bin/nvcc", f"-DCUDAToolkit_ROOT={cuda}",
            "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"]
    with (build.parent / f"{build.name}.log").open("w") as fh:
        run(argv, stdout=fh, stderr=subprocess.STDOUT)
    return json.loads((build / "compile_commands.json").read_text())


def tu_argv(entries: list[dict], tree: str, tu: str) -> list[str]:
    """The nvcc command CMake would run for ggml/src/ggml-cuda/<tu>, includes inlined, output <stem>.o."""
    path = str(Path(tree) / "ggml" / "src" / "ggml-cuda" / tu)
    entry = next((e for e in entries if e["file"] == path), None)
    if entry is None:
        raise SystemExit(f"{tu}: not in {tree}'s compile_commands.json (is it a ggml-cuda source of this tree?)")
    argv = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    if "--options-file" in argv:
        i = argv.index("--options-file")
        rsp = Path(entry["directory"]) / argv[i + 1]
        argv[i:i + 2] = shlex.split(rsp.read_text())
    argv[argv.index("-o") + 1] = f"{Path(tu).stem}.o"
    return argv


def variant_argv(base: list[str], variant: str) -> list[str]:
    argv = list(base)
    if variant.startswith("emulated"):
        argv.insert(1, f"-ccbin={CROSS_GXX}")
        if variant == "emulated":
            argv[argv.index("-O3"):argv.index("-O3")] = CHAR_FLAGS  # where CMAKE_CUDA_FLAGS go
    if variant != "native-nokeep":
        argv += ["--keep", "--keep-dir", "."]
    return argv


def inner(plan_file: str) -> int:
    if os.geteuid() != 0:  # started before the outside wrote our uid map: wait for it, then exec again as root
        sys.stdin.readline()
        os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), "--inner", plan_file])
    plan = json.loads(Path(plan_file).read_text())
    work, root = Path(plan["work"]), Path(plan["arm64_root"])
    cuda = work / "cuda"
    register_private_qemu()
    # the chroot's view: /proc, /dev, the work dir and the trees at their own paths, the aarch64 CUDA root at
    # <work>/cuda; outside, the x86_64 root at the same <work>/cuda
    run(["mount", "-t", "proc", "proc", str(root / "proc")])
    bind("/dev", root / "dev", recursive=True)
    if plan["prepare_root"]:
        prepare_root_inside(plan)
    if not (root / CROSS_GXX.lstrip("/")).exists():
        raise SystemExit(f"{root} has no {CROSS_GXX}")
    bind(work, in_root(root, work))
    for tree in plan["trees"].values():
        if not str(tree["path"]).startswith(str(work) + "/"):
            bind(tree["path"], in_root(root, tree["path"]))
    bind(plan["cuda"]["x86_64"]["root"], cuda)
    bind(plan["cuda"]["aarch64"]["root"], in_root(root, cuda))
    cross = run(chroot_argv(root, "/", [CROSS_GXX, "--version"]), capture_output=True, text=True).stdout
    native = run(["g++", "--version"], capture_output=True, text=True).stdout
    print(f"  [ns] host compilers: native {native.splitlines()[0]}; in the arm64 root "
          f"{cross.splitlines()[0]}", flush=True)

    results: dict = {"tus": {}}
    for name, tree in plan["trees"].items():
        t = time.monotonic()
        tree["entries"] = configure(tree["path"], work / f"cmake-{name}", cuda, plan["cmake_arch"])
        print(f"  [ns] configured {name} with CMake ({plan['cmake_arch']}) in {time.monotonic() - t:.0f}s",
              flush=True)
    scratch = work / "scratch"
    for spec in plan["tus"]:
        name, tu = spec.split(":", 1) if ":" in spec else ("vendor", spec)
        base = tu_argv(plan["trees"][name]["entries"], plan["trees"][name]["path"], tu)
        key = f"{name}:{tu}"
        results["tus"][key] = {}
        if spec == plan["tus"][0]:
            print("  [ns] native command: " + shlex.join(
                [a for a in variant_argv(base, "native") if not a.startswith("-DGGML_CUDA_FA_")])
                + "  (-DGGML_CUDA_FA_* defines left out here)", flush=True)
        for variant in VARIANTS:
            shutil.rmtree(scratch, ignore_errors=True)
            (scratch / "tmp").mkdir(parents=True)
            argv = variant_argv(base, variant)
            if variant.startswith("emulated"):
                argv = chroot_argv(root, scratch, argv, {"TMPDIR": scratch / "tmp"})
                env, cwd = None, None
            else:
                env, cwd = dict(os.environ, TMPDIR=str(scratch / "tmp"), LC_ALL="C"), scratch
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.monotonic()
            with (scratch / "tmp" / "compile.log").open("w") as log:
                proc = subprocess.run(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
            wall = time.monotonic() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            dest = work / "out" / name / tu / variant
            shutil.rmtree(dest, ignore_errors=True)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(scratch, dest, ignore=shutil.ignore_patterns("tmp"))
            shutil.copy(scratch / "tmp" / "compile.log", dest / "compile.log")
            results["tus"][key][variant] = {"rc": proc.returncode, "wall": wall, "cpu": cpu, "dir": str(dest)}
            print(f"  [ns] {key:<34} {variant:<17} wall {wall:7.1f}s  cpu {cpu:7.1f}s"
                  + ("" if proc.returncode == 0 else f"  FAILED (exit {proc.returncode}, {dest}/compile.log)"),
                  flush=True)
    Path(plan["results"]).write_text(json.dumps(results, indent=1))
    return 0


# --------------------------------------------------------------------------- comparing


TMPXFT = re.compile(r"tmpxft_[0-9a-f]+_[0-9a-f]+[-_]\d+_")
MODULE_ID = re.compile(r"_[0-9a-f]{8}_(\d+)_(\w+?)_cu_[0-9a-f]{8}")


def normalise(text: str) -> str:
    """nvcc's temporary-file prefix (tmpxft_<pid>_<n>-<k>_, absent with --keep) dropped, module ids masked."""
    return MODULE_ID.sub(r"_<id>_\1_\2_cu_<id>", TMPXFT.sub("", text))


def tool(argv: list[str], env: dict | None = None) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stdout


def sections(obj: Path) -> list[tuple[str, int, int, int]]:
    """(name, sh_type, sh_flags, size) of every section of a 64-bit little-endian ELF object."""
    data = obj.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strings = heads[shstrndx][4]
    name = lambda off: data[strings + off:data.index(b"\0", strings + off)].decode()  # noqa: E731
    return [(name(h[0]), h[1], h[2], h[5]) for h in heads[1:]]


SHT_NOBITS, SHF_ALLOC, SHF_EXECINSTR = 8, 0x2, 0x4
SHT_PROGBITS, SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_NOTE = 1, 14, 15, 7


def host_dump(obj: Path) -> dict[str, str]:
    """A normalised text of each part of a host object; .comment apart (the compiler's version)."""
    parts: dict[str, str] = {}
    for name, kind, flags, size in sections(obj):
        if name in (".comment", ".note.GNU-stack"):
            continue
        if kind == SHT_NOBITS:
            text = f"{size} bytes"
        elif flags & SHF_EXECINSTR:
            text = tool(["objdump", "-d", "-r", "-w", "-j", name, str(obj)])
        elif kind in (SHT_PROGBITS, SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_NOTE):
            text = tool(["objdump", "-s", "-j", name, str(obj)])
        else:  # symbols, strings, relocations, groups: read below through nm and objdump -r
            continue
        parts[name] = normalise("\n".join(text.splitlines()[2:]))
    parts["symbols"] = "\n".join(sorted(normalise(tool(["nm", "-a", "-S", str(obj)])).splitlines()))
    parts["relocations"] = normalise("\n".join(tool(["objdump", "-r", str(obj)]).splitlines()[2:]))
    return parts


def comment(obj: Path) -> str:
    raw = tool(["readelf", "-p", ".comment", str(obj)])
    return "; ".join(m.strip() for m in re.findall(r"\]\s+(.*)", raw))


def same_bytes_but_comment(a: Path, b: Path) -> bool:
    """The two objects byte for byte, once .comment (the compiler's version string) is removed from both."""
    out = []
    for obj in (a, b):
        tmp = obj.with_name(obj.name + ".nocomment")
        run(["objcopy", "-R", ".comment", str(obj), str(tmp)])
        out.append(tmp.read_bytes())
        tmp.unlink()
    return out[0] == out[1]


def sass(cuobjdump: str, nvdisasm: Path, obj: Path) -> str:
    env = dict(os.environ, PATH=f"{nvdisasm}{os.pathsep}{os.environ.get('PATH', '')}")
    return normalise(tool([cuobjdump, "-sass", str(obj)], env=env))


# floating literals as cudafe++ writes them: 1.1754944E-38F (x86_64 nvcc), 1.175494351e-38F (aarch64 nvcc)
FLOAT = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)([fFlL]?)(?![\w.])")
# (precision bits, least normal exponent) of float, double, and x86-64's long double (x87 80-bit)
FORMATS = {"f": (24, -126), "": (53, -1022), "l": (64, -16382)}


def binary_value(text: str, suffix: str) -> str:
    """The value a decimal literal rounds to in its type on x86-64 (exact; round half to even)."""
    p, emin = FORMATS[suffix.lower()]
    q = Fraction(Decimal(text))
    if q == 0:
        return "0"
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    shift = p - 1 - max(e, emin)
    n = round(q * Fraction(2) ** shift)
    while n and n % 2 == 0:
        n //= 2
        shift -= 1
    return f"{n}p{-shift}{suffix.lower()}"


def by_value(line: str) -> str:
    return FLOAT.sub(lambda m: binary_value(m.group(1), m.group(2)), line)


def cudafe_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text(errors="replace").splitlines() if not re.match(r"#\s*\d+\s+\"", ln)]


def compare_cudafe(a: Path, b: Path) -> tuple[str, list[str]]:
    la, lb = cudafe_lines(a), cudafe_lines(b)
    if la == lb:
        return "same", []
    if len(la) != len(lb):
        return f"differs ({len(la)} vs {len(lb)} lines)", first_diff(la, lb)
    spelled = [(x, y) for x, y in zip(la, lb) if x != y]
    real = [(x, y) for x, y in spelled if by_value(x) != by_value(y)]
    if not real:
        return f"same by value ({len(spelled)} lines: float spelling)", []
    return f"differs ({len(real)} lines)", [f"- {x.strip()[:150]}\n      + {y.strip()[:150]}" for x, y in real[:3]]


def first_diff(a: list[str], b: list[str], n: int = 3) -> list[str]:
    import difflib

    out = []
    for line in difflib.unified_diff(a, b, lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")):
            continue
        out.append(line.strip()[:160])
        if len(out) >= 2 * n:
            break
    return out


def compare_tu(d: dict, cuobjdump: str, nvdisasm: Path) -> dict:
    stem = lambda v: Path(d[v]["dir"]) / Path(Path(d[v]["dir"]).parent.name).stem  # noqa: E731
    ref = stem("native")
    res: dict = {"comment": {}}
    ref_host = host_dump(ref.with_suffix(".o"))
    ref_sass = sass(cuobjdump, nvdisasm, ref.with_suffix(".o"))
    ref_ptx = normalise(ref.with_suffix(".ptx").read_text())
    res["comment"]["native"] = comment(ref.with_suffix(".o"))
    res["sass_instrs"] = sum(1 for ln in ref_sass.splitlines() if re.match(r"\s*/\*[0-9a-f]{4,}\*/", ln))
    res["text_bytes"] = sum(size for name, _, flags, size in sections(ref.with_suffix(".o")) if flags & SHF_EXECINSTR)
    for variant in VARIANTS[1:]:
        if d[variant]["rc"] != 0:
            res[variant] = {"failed": True}
            continue
        path = stem(variant)
        r: dict = {"examples": {}}
        host = host_dump(path.with_suffix(".o"))
        bad = sorted(k for k in set(ref_host) | set(host) if ref_host.get(k) != host.get(k))
        r["host"] = bad
        for k in bad[:2]:
            r["examples"][f"host {k}"] = first_diff(ref_host.get(k, "").splitlines(), host.get(k, "").splitlines())
        res["comment"][variant] = comment(path.with_suffix(".o"))
        r["bytes"] = same_bytes_but_comment(ref.with_suffix(".o"), path.with_suffix(".o"))
        s = sass(cuobjdump, nvdisasm, path.with_suffix(".o"))
        r["sass"] = s == ref_sass
        if not r["sass"]:
            r["examples"]["SASS"] = first_diff(ref_sass.splitlines(), s.splitlines())
        if variant != "native-nokeep":
            ptx = normalise(path.with_suffix(".ptx").read_text())
            r["ptx"] = ptx == ref_ptx
            if not r["ptx"]:
                r["examples"]["PTX"] = first_diff(ref_ptx.splitlines(), ptx.splitlines())
            r["cubin_bytes"] = path.with_suffix(".cubin").read_bytes() == ref.with_suffix(".cubin").read_bytes()
            r["cudafe"], ex = compare_cudafe(ref.with_suffix(".cudafe1.cpp"), path.with_suffix(".cudafe1.cpp"))
            if ex:
                r["examples"]["cudafe++ host source"] = ex
        res[variant] = r
    return res


# --------------------------------------------------------------------------- main


def yes(flag: bool) -> str:
    return "same" if flag else "DIFFERS"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Compile a sample of ggml-cuda TUs natively (x86_64 nvcc + g++) and the seed's way (aarch64 "
                    "nvcc under QEMU + x86_64-linux-gnu-g++, with and without buildkit's char flags); compare "
                    "PTX, SASS, host objects and cudafe++'s host source. Prints a table; asserts nothing.",
        epilog="TUs: names of .cu files in ggml/src/ggml-cuda of --tree, or fork:<name> for the fork's tree. "
               "Needs root (unshare, mount, chroot), qemu-user-static and a kernel with binfmt_misc namespaces "
               "(6.7+); no global binfmt handler is registered.")
    ap.add_argument("--arch", choices=sorted(ARCHS), default="sm_90",
                    help="sm_90 (CMake 90-real, the default) or sm_120 (120a-real)")
    ap.add_argument("--tree", default=DEFAULT_TREE, help=f"the llama.cpp source tree (default {DEFAULT_TREE})")
    ap.add_argument("--fork", default=DEFAULT_FORK,
                    help="the DFlash fork: a git dir (a snapshot, e.g. from the fetch tool) or a source tree; "
                         f"'' for none (default {DEFAULT_FORK})")
    ap.add_argument("--fork-rev", default="HEAD", help="the fork's commit when --fork is a git dir")
    ap.add_argument("--tus", default=DEFAULT_TUS, help=f"comma-separated (default {DEFAULT_TUS})")
    ap.add_argument("--out", default=None, help="also write everything printed to this file")
    ap.add_argument("--cuda", default="13.1", help="the CUDA toolkit from NVIDIA's wheels (default 13.1)")
    ap.add_argument("--work", default="/tmp/cuda-cross-objects", help="work dir (kept: objects, logs)")
    ap.add_argument("--cache", default="/tmp/hbench-cache", help="buildkit's cache dir for the CUDA roots")
    ap.add_argument("--arm64-root", default=None, help="a Debian 12 arm64 root (default <work>/arm64root; made "
                                                       "when it lacks the cross g++)")
    ap.add_argument("--arm64-from", choices=("auto", "image", "debootstrap"), default="auto",
                    help=f"how to make a missing arm64 root: the arm64 half of {MULTIARCH_IMAGE} (image), "
                         "debootstrap, or the image when the engine has it (auto, the default)")
    ap.add_argument("--compare-only", action="store_true",
                    help="compare and print again from a finished run's --work dir, compiling nothing")
    ap.add_argument("--inner", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inner:
        return inner(args.inner)

    from sass import nvdisasm_dir

    started = time.monotonic()
    work = Path(args.work).resolve()
    if args.compare_only:
        plan = json.loads((work / "plan.json").read_text())
        for line in (work / "compile-phase.txt").read_text().splitlines():
            say(line)
        say("(the compile phase above as that run printed it; compared again with --compare-only)")
        roots, trees = plan["cuda"], plan["trees"]
    else:
        plan = prepare_and_compile(args, work)
        if plan is None:
            finish(args.out)
            return 1
        roots, trees = plan["cuda"], plan["trees"]
    nvdisasm = nvdisasm_dir()
    cuobjdump = str(Path(roots["x86_64"]["root"]) / "bin" / "cuobjdump")
    results = json.loads((work / "results.json").read_text())["tus"]
    compared = {}
    for key, d in results.items():
        if d["native"]["rc"] != 0:
            compared[key] = {"native_failed": True}
            continue
        compared[key] = compare_tu(d, cuobjdump, nvdisasm)
    report(results, compared, trees, args)
    took = f"this comparison {time.monotonic() - started:.0f}s" if args.compare_only else \
        f"whole run {time.monotonic() - started:.0f}s"
    say(f"(objects, intermediate files and compile logs under {work}/out; {took})")
    finish(args.out)
    return 0


def map_ids(proc: subprocess.Popen) -> None:
    """Map uids and gids 0-65535 of the new user namespace to the same ids outside, written from here (root
    outside; unshare's own --map-users needs newuidmap, and --map-root-user maps uid 0 alone, with which
    dpkg cannot chown a file to another owner), then tell the namespace's first process to go on."""
    own = os.readlink("/proc/self/ns/user")
    for _ in range(600):
        try:
            if os.readlink(f"/proc/{proc.pid}/ns/user") != own:
                break
        except OSError:
            pass
        time.sleep(0.05)
    else:
        raise SystemExit("unshare did not enter a new user namespace")
    for kind in ("uid_map", "gid_map"):
        Path(f"/proc/{proc.pid}/{kind}").write_text("0 0 65536\n")
    proc.stdin.write("go\n")
    proc.stdin.close()


def outside_handlers() -> list[str]:
    binfmt = Path("/proc/sys/fs/binfmt_misc")
    if not (binfmt / "status").exists():
        return []
    return sorted(p.name for p in binfmt.iterdir() if p.name not in ("register", "status"))


def prepare_and_compile(args, work: Path) -> dict | None:
    """Everything up to the compiled objects: CUDA roots, trees, the arm64 root, the namespace run."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "cuda").mkdir(exist_ok=True)
    tus = [t.strip() for t in args.tus.split(",") if t.strip()]  # none: only prepare and configure
    if not args.fork:
        tus = [t for t in tus if not t.startswith("fork:")]
    say(f"cuda_cross_objects: {len(tus)} ggml-cuda TUs, {args.arch} ({ARCHS[args.arch]}), CUDA {args.cuda}, "
        f"{datetime.date.today().isoformat()}")
    say(f"  machine: {os.uname().machine}, {os.cpu_count()} cores, kernel {os.uname().release}; "
        f"compiles one at a time under nice -n 19")
    roots = cuda_roots(args.cuda, Path(args.cache))
    trees = {"vendor": {"path": str(Path(args.tree).resolve()), "label": Path(args.tree).name}}
    say(f"  tree: {trees['vendor']['path']}")
    if any(t.startswith("fork:") for t in tus):
        path, commit = fork_tree(args.fork, args.fork_rev, work)
        trees["fork"] = {"path": str(path), "label": f"fork {commit[:12]}"}
        say(f"  fork: {args.fork} at {commit} -> {path}")
    arm64 = Path(args.arm64_root).resolve() if args.arm64_root else work / "arm64root"
    prepare = not arm64_root_ready(arm64)
    if prepare and not (arm64 / "usr/bin/apt-get").exists():
        shutil.rmtree(arm64, ignore_errors=True)
        if args.arm64_from == "debootstrap" or not unpack_arm64_from_image(arm64, work):
            if args.arm64_from == "image":
                raise SystemExit(f"no {MULTIARCH_IMAGE} in the engine (python -m tests.images makes it)")
            debootstrap_first_stage(arm64)
    say(f"  arm64 root: {arm64}" + (" (the cross g++ is installed in the namespace below)" if prepare else ""))
    qemu_version = tool(["qemu-aarch64-static", "--version"]).splitlines()[0]
    say(f"  QEMU: {qemu_version}")

    plan = {"work": str(work), "arm64_root": str(arm64), "prepare_root": prepare, "cuda": roots,
            "trees": trees, "tus": tus, "cmake_arch": ARCHS[args.arch], "results": str(work / "results.json")}
    (work / "plan.json").write_text(json.dumps(plan, indent=1))
    before = outside_handlers()
    say("  entering a new user+mount+pid namespace (unshare --user --mount --pid --fork; ids 0-65535 mapped to themselves) ...")
    ns = ["nice", "-n", "19", "unshare", "--user", "--mount", "--pid", "--fork", "--kill-child",
          sys.executable, str(Path(__file__).resolve()), "--inner", str(work / "plan.json")]
    proc = subprocess.Popen(ns, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    map_ids(proc)
    for line in proc.stdout:
        say(line.rstrip("\n"))
    if proc.wait() != 0:
        say(f"the namespace run failed (exit {proc.returncode})")
        return None
    after = outside_handlers()
    say(f"  back outside: the machine's binfmt_misc handlers before {before or 'none'}, after {after or 'none'} "
        f"({'unchanged' if before == after else 'CHANGED'}; the namespace's own instance went with it)")
    (work / "compile-phase.txt").write_text("\n".join(LOG) + "\n")
    return plan


def report(results: dict, compared: dict, trees: dict, args) -> None:
    say("")
    if not compared:
        say("no TUs given: prepared and configured only")
        return
    say("wall and CPU (user+sys, all processes) seconds per compile; this 2-core machine is shared, so CPU is the "
        "steadier figure")
    say(f"{'TU':<34} {'native':>15} {'emulated':>15} {'no flags':>15} {'ratio (cpu)':>12} {'SASS instrs':>12} "
        f"{'host code':>10}")
    for key, d in results.items():
        cells = [f"{d[v]['wall']:6.1f}/{d[v]['cpu']:6.1f}" for v in VARIANTS[:3]]
        ratio = d["emulated"]["cpu"] / d["native"]["cpu"] if d["native"]["cpu"] else 0
        c = compared.get(key, {})
        say(f"{key:<34} {cells[0]:>15} {cells[1]:>15} {cells[2]:>15} {ratio:11.1f}x {c.get('sass_instrs', 0):12d} "
            f"{c.get('text_bytes', 0):8d} B")
    total = {v: sum(d[v]["cpu"] for d in results.values()) for v in VARIANTS[:3]}
    walls = {v: sum(d[v]["wall"] for d in results.values()) for v in VARIANTS[:3]}
    say(f"{'all':<34} " + " ".join(f"{walls[v]:6.1f}/{total[v]:6.1f}".rjust(15) for v in VARIANTS[:3])
        + (f" {total['emulated'] / total['native']:11.1f}x" if total["native"] else ""))
    say("")
    say(f"against native, {args.arch}: emulated = aarch64 nvcc under QEMU, -ccbin x86_64-linux-gnu-g++, "
        f"{' '.join(CHAR_FLAGS)}")
    head = (f"{'TU':<34} {'PTX':<8} {'SASS':<8} {'host .o':<8} {'.o bytes':<9} {'cudafe++ host source':<46} "
            f"{'no flags: differs':<36} {'ctl'}")
    say(head)
    say("-" * len(head))
    verdict_ok, noflag_diff = True, []
    for key, c in compared.items():
        if c.get("native_failed") or c["emulated"].get("failed"):
            say(f"{key:<34} compile failed (see the log above)")
            verdict_ok = False
            continue
        e, n, k = c["emulated"], c.get("emulated-noflags", {}), c["native-nokeep"]
        ok = e["ptx"] and e["sass"] and not e["host"]
        verdict_ok &= ok and e["cudafe"].startswith("same")
        if n.get("failed"):
            nf = "failed"
        else:
            host = f"host .o ({', '.join(n['host'][:3])}{', ...' if len(n['host']) > 3 else ''})"
            parts = [p for p, bad in (("PTX", not n["ptx"]), ("SASS", not n["sass"]), (host, bool(n["host"])),
                                      ("cudafe++", not n["cudafe"].startswith("same"))) if bad]
            nf = ", ".join(parts) if parts else "nothing"
            if parts:
                noflag_diff.append(key)
        ctl = "same" if (k.get("sass") and not k.get("host")) else "DIFFERS"
        say(f"{key:<34} {yes(e['ptx']):<8} {yes(e['sass']):<8} {yes(not e['host']):<8} {yes(e['bytes']):<9} "
            f"{e['cudafe']:<46} {nf:<36} {ctl}")
    say("")
    say("columns: emulated vs native: PTX; SASS (cuobjdump -sass); host .o (every section but .comment, the "
        "symbols and relocations, tmpxft_ names and module ids normalised); .o bytes (the whole object byte for "
        "byte once .comment is removed, nothing normalised); cudafe++'s .cudafe1.cpp (line markers dropped, "
        "floats by value). 'no flags': what differs from native when the emulated compile lacks the char flags "
        "(PTX, SASS, host .o, cudafe++). ctl: native without --keep vs native (host .o and SASS)")
    for key, c in compared.items():
        for variant in ("emulated", "emulated-noflags", "native-nokeep"):
            r = c.get(variant) or {}
            if r.get("ptx") is not None and not r.get("cubin_bytes", True):
                say(f"  {key} {variant}: the .cubin files differ in bytes")
            for what, lines in (r.get("examples") or {}).items():
                if lines:
                    say(f"  {key} {variant}, {what}:")
                    for ln in lines:
                        say(f"      {ln}")
    for who, variants in (("native", ("native", "native-nokeep")), ("emulated", ("emulated", "emulated-noflags"))):
        seen = sorted({s for c in compared.values() for v, s in c.get("comment", {}).items() if v in variants})
        say(f"  .comment of the {who} objects (left out of 'host .o'): {' | '.join(seen)}")
    say("")
    n = len(compared)
    if verdict_ok:
        tail = (f"; without the char flags {len(noflag_diff)} of {n} differ ({', '.join(noflag_diff)})"
                if noflag_diff else "; without the char flags these TUs happen not to differ either")
        say(f"verdict: all {n} TUs give the same PTX, SASS and host object (after normalisation) emulated with "
            f"buildkit's flags as natively{tail}.")
    else:
        say(f"verdict: NOT the same: see the rows marked DIFFERS or failed above ({n} TUs).")


def finish(out: str | None) -> None:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text("\n".join(LOG) + "\n")
        print(f"(written to {out})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
