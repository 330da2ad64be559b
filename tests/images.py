"""Local base images for the Docker tests; no registry is ever contacted.

Nothing can be pulled on the test machines, so the images builds start FROM are made here:

* ``buildkit-test/debian:bookworm``: made by ``buildkit base debian --suite bookworm`` (the command the
  README's offline section shows; buildkit/flows/setup/debianbase.py): ``debootstrap --variant=minbase``
  written as an OCI image and loaded. The mirror is the machine's own apt source, read at run time from
  /etc/apt/sources.list.d/debian.sources (or /etc/apt/sources.list); no host name is written here.
* ``buildkit-test/debian-multiarch:bookworm``: one local image of two platforms (an OCI index), for
  cross builds: the amd64 image above (made once, shared), and arm64 made with buildkit's
  ``debootstrap --foreign --arch=arm64`` root, which only unpacks the packages (no arm64 code runs, so
  no QEMU is needed; dpkg's status file is written from the unpacked packages' control fields, as the
  second stage would have), put together by buildkit's OCI index writer.
* ``buildkit-test/debian-multiarch:trixie``: the same two platforms of Debian 13, whose GCC 14 compiles
  llama.cpp's armv9.2 (SME) CPU variants (the real tree's default CPU level for arm64).
* ``buildkit-test/busybox:latest``: the static busybox of the host (package busybox-static) and its
  applet links, for tiny cases.

Both are skipped when the image already exists (a Debian one made by an older `buildkit base debian`, whose history
has no created time, is made again: buildkit refuses it as a base). A Dockerfile ``FROM`` either works with
``docker buildx build`` on the docker driver without any pull (the engine's image store is used).

Run as a script (root, Docker engine running): ``python -m tests.images [--force] [debian|busybox ...]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# LLAMA_BUILDKIT_TEST_IMAGE_PREFIX names them under another repository prefix: a checkout whose bases must differ
# from those an engine shared with other runs holds (made by another buildkit) makes its own beside them
PREFIX = os.environ.get("LLAMA_BUILDKIT_TEST_IMAGE_PREFIX") or "buildkit-test"
DEBIAN_IMAGE = f"{PREFIX}/debian:bookworm"
BUSYBOX_IMAGE = f"{PREFIX}/busybox:latest"
MULTIARCH_IMAGE = f"{PREFIX}/debian-multiarch:bookworm"
# the same, with its arm64 half configured (debootstrap's second stage, run under QEMU): an emulated arm64
# build stage runs apt in it (the unpack-only half has no users, no configured keyring for apt)
CONFIGURED_MULTIARCH_IMAGE = f"{PREFIX}/debian-multiarch-configured:bookworm"
# Debian 13: GCC 14, natively and as a cross compiler (tests/e2e/test_e2e_cross.py)
TRIXIE_MULTIARCH_IMAGE = f"{PREFIX}/debian-multiarch:trixie"
FOREIGN_ARCH = "arm64"
DEBIAN_SUITE = "bookworm"

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageError(RuntimeError):
    """A test base image cannot be made on this machine."""


def _log(msg: str) -> None:
    print(f"tests.images: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- queries


def docker_available() -> bool:
    """True when the docker CLI is on PATH and the engine answers."""
    if shutil.which("docker") is None:
        return False
    try:
        r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and bool(r.stdout.strip())


def image_exists(ref: str) -> bool:
    r = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref],
                       capture_output=True, text=True)
    return r.returncode == 0


def undated(ref: str) -> bool:
    """Whether an image of the engine has a history entry without a created time: a base made by an older
    `buildkit base debian`, which buildkit now refuses (engine/baseimages.check_base_history), so it is made
    again."""
    import docker

    try:
        return any(not entry.get("Created") for entry in docker.from_env().api.history(ref))
    except docker.errors.APIError:
        return False


def _current(ref: str) -> bool:
    return image_exists(ref) and not undated(ref)


def _making(ref: str):
    """An exclusive lock held while `ref` is made: test processes running side by side (pytest-xdist's
    workers, a second tier) make each base once; the others wait, then find it."""
    from buildkit.core.filelock import file_lock

    name = re.sub(r"[^A-Za-z0-9._-]", "_", ref)
    return file_lock(Path(tempfile.gettempdir()) / "llama-buildkit-test-images" / f"{name}.lock",
                     on_wait=lambda: _log(f"waiting for another test process making {ref}"))


def debian_mirror() -> str:
    """The URI of the machine's main Debian archive (buildkit's own reading of apt's sources)."""
    from buildkit.flows.setup.debianbase import machine_mirror

    mirror = machine_mirror()
    if mirror is None:
        raise ImageError("no apt source of Debian in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list")
    return mirror


# --------------------------------------------------------------------------- building


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ImageError(f"making {what} needs root (debootstrap / docker import)")


def _apt_install(*packages: str) -> None:
    _require_root("the test base images")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _log(f"installing {' '.join(packages)} with apt-get")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
                   check=True, env=env)


def _import_dir(root: Path, ref: str, cmd: str, platform: str = "") -> None:
    """``tar -C root -c . | docker import - ref`` with PATH and CMD set."""
    tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-c", "."],
                           stdout=subprocess.PIPE)
    try:
        imp = subprocess.run(
            ["docker", "import", *(["--platform", platform] if platform else []),
             "--change", f"ENV PATH={_DEFAULT_PATH}",
             "--change", f'CMD ["{cmd}"]',
             "-", ref],
            stdin=tar.stdout, capture_output=True, text=True)
    finally:
        assert tar.stdout is not None
        tar.stdout.close()
        tar_rc = tar.wait()
    if tar_rc != 0 or imp.returncode != 0:
        raise ImageError(f"docker import of {ref} failed: {imp.stderr.strip() or f'tar exit {tar_rc}'}")


def _need_debootstrap(ref: str) -> None:
    _require_root(ref)
    if shutil.which("debootstrap") is None:
        _apt_install("debootstrap")


def ensure_debian_image(ref: str = DEBIAN_IMAGE, *, force: bool = False, suite: str = DEBIAN_SUITE) -> str:
    """Make ``ref`` from ``debootstrap --variant=minbase <suite>`` unless it exists; returns ref. Every suite
    comes from the machine's own Debian mirror (the one serving bookworm serves them all)."""
    if not force and _current(ref):
        return ref
    with _making(ref):
        if not force and _current(ref):  # made by another test process while this one waited
            return ref
        return _make_debian_image(ref, suite)


def _make_debian_image(ref: str, suite: str) -> str:
    """`buildkit base debian` (flows/setup/debianbase.py), the command the README's offline section shows."""
    _need_debootstrap(ref)
    _log(f"buildkit base debian --suite {suite} --tag {ref}")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    r = subprocess.run([sys.executable, "-m", "buildkit.cli", "base", "debian", "--suite", suite, "--tag", ref,
                        "--mirror", debian_mirror()], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise ImageError(f"buildkit base debian failed: {r.stderr.strip()[-2000:]}")
    return ref


def _foreign_first_stage(root: Path, arch: str, suite: str = DEBIAN_SUITE) -> None:
    from buildkit.core.errors import BuildkitError
    from buildkit.flows.setup.debianbase import foreign_first_stage

    try:
        foreign_first_stage(root, suite, debian_mirror(), arch)
    except BuildkitError as exc:
        raise ImageError(str(exc)) from None


def _configured_foreign_image(work: Path, arch: str, ref: str, suite: str = DEBIAN_SUITE) -> None:
    """`ref`: a configured root of `arch`, debootstrap's second stage run in a container of the first
    stage's root (under QEMU: the caller registers a binfmt handler; container=lxc, as the second stage
    in a container wants)."""
    _foreign_first_stage(work / "rootfs", arch, suite)
    stage1 = ref + "-stage1"
    _import_dir(work / "rootfs", stage1, "bash", platform=f"linux/{arch}")
    shutil.rmtree(work / "rootfs")
    name = f"buildkit-second-stage-{os.getpid()}"
    try:
        r = subprocess.run(["docker", "run", "--name", name, "--platform", f"linux/{arch}", "-e", "container=lxc",
                            stage1, "/debootstrap/debootstrap", "--second-stage"], capture_output=True, text=True)
        if r.returncode != 0:
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
            raise ImageError(f"debootstrap --second-stage ({arch}, under emulation) failed:\n{tail}")
        export = subprocess.Popen(["docker", "export", name], stdout=subprocess.PIPE)
        imp = subprocess.run(["docker", "import", "--platform", f"linux/{arch}",
                              "--change", f"ENV PATH={_DEFAULT_PATH}", "--change", 'CMD ["bash"]', "-", ref],
                             stdin=export.stdout, capture_output=True, text=True)
        assert export.stdout is not None
        export.stdout.close()
        if export.wait() != 0 or imp.returncode != 0:
            raise ImageError(f"docker import of {ref} failed: {imp.stderr.strip()}")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        subprocess.run(["docker", "rmi", stage1], capture_output=True)


def ensure_multiarch_image(ref: str = MULTIARCH_IMAGE, *, force: bool = False, configured: bool = False,
                           suite: str = DEBIAN_SUITE) -> str:
    """Make ``ref``, an OCI index of the amd64 Debian image and an arm64 one (of `suite`), unless it exists.
    configured: the arm64 half goes through debootstrap's second stage, under QEMU (registered by the
    caller); otherwise it is only unpacked, and nothing of arm64 runs."""
    if not force and _current(ref):
        return ref
    with _making(ref):
        if not force and _current(ref):
            return ref
        return _make_multiarch_image(ref, configured, suite)


def _make_multiarch_image(ref: str, configured: bool, suite: str) -> str:
    """The native Debian image of `suite` (made once, shared with the other tests) and a foreign one, as one
    OCI index: buildkit's index archive (oci/ociindex.py) of the native image's `docker save` and the
    foreign root written by `buildkit base debian`'s layout writer (flows/setup/debianbase.py)."""
    from buildkit.core.errors import BuildkitError
    from buildkit.engine.current import get_engine
    from buildkit.flows.setup.debianbase import root_layout, unpacked_root
    from buildkit.oci.imageref import parse_image_ref
    from buildkit.oci.ociindex import write_index_archive

    _need_debootstrap(ref)
    native = ensure_debian_image() if suite == DEBIAN_SUITE else \
        ensure_debian_image(f"{PREFIX}/debian:{suite}", suite=suite)
    work = Path(tempfile.mkdtemp(prefix="buildkit-multiarch-"))
    foreign = f"buildkit-test/debian-{FOREIGN_ARCH}-{'configured' if configured else 'only'}:{suite}"
    try:
        engine = get_engine()
        if configured:
            _log(f"debootstrap --foreign --arch={FOREIGN_ARCH}, then its second stage under emulation")
            _configured_foreign_image(work, FOREIGN_ARCH, foreign, suite)
            foreign_image = engine.save(foreign, work / "foreign.tar")
        else:
            _log(f"debootstrap --foreign --arch={FOREIGN_ARCH} (unpack only, nothing of {FOREIGN_ARCH} runs)")
            created = unpacked_root(work / "rootfs", suite, debian_mirror(), FOREIGN_ARCH)
            foreign_image = work / "foreign"
            root_layout(work / "rootfs", f"linux/{FOREIGN_ARCH}", foreign_image,
                        f"debootstrap --foreign --arch={FOREIGN_ARCH} {suite} (unpacked only)", created)
            shutil.rmtree(work / "rootfs")
        native_image = engine.save(native, work / "native.tar")
        archive = work / "multiarch.tar"
        digest = write_index_archive([("linux/amd64", native_image), (f"linux/{FOREIGN_ARCH}", foreign_image)],
                                     archive, [str(parse_image_ref(ref))])
        engine.load(archive, [ref])
        _log(f"{ref}: linux/amd64 + linux/{FOREIGN_ARCH} ({digest[:19]})")
    except BuildkitError as exc:
        raise ImageError(str(exc)) from None
    finally:
        subprocess.run(["docker", "rmi", foreign], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return ref


def remove_local_images(repository: str) -> None:
    """Remove every local tag of `repository`: the engine outlives a test session or bench (and `build --push`
    looks for build keys in it), so none of their images is left behind."""
    import docker

    client = docker.from_env()
    for image in client.images.list(name=repository):
        # its tags, and the references of what was pulled by digest (repository@sha256:..., no tag)
        refs = [*image.tags, *(image.attrs.get("RepoDigests") or ())]
        for ref in refs:
            if ref.startswith((repository + ":", repository + "@")):
                try:
                    client.images.remove(ref, force=True)
                except docker.errors.APIError:
                    pass


def ensure_busybox_image(ref: str = BUSYBOX_IMAGE, *, force: bool = False) -> str:
    """Make ``ref`` from the host's static busybox unless it exists; returns ref."""
    if not force and image_exists(ref):
        return ref
    with _making(ref):
        if not force and image_exists(ref):
            return ref
        return _make_busybox_image(ref)


def _make_busybox_image(ref: str) -> str:
    busybox = Path("/bin/busybox")
    if not _is_static(busybox):
        _apt_install("busybox-static")
    if not _is_static(busybox):
        raise ImageError(f"{busybox} is not statically linked (install busybox-static)")
    work = Path(tempfile.mkdtemp(prefix="buildkit-busybox-"))
    try:
        root = work / "rootfs"
        for d in ("bin", "tmp", "etc", "root", "proc", "sys", "dev"):
            (root / d).mkdir(parents=True)
        (root / "tmp").chmod(0o1777)
        shutil.copy2(busybox, root / "bin" / "busybox")
        applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True,
                                 check=True).stdout.split()
        for applet in applets:
            link = root / "bin" / applet
            if applet != "busybox" and not link.exists():
                link.symlink_to("busybox")
        (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (root / "etc" / "group").write_text("root:x:0:\n")
        _import_dir(root, ref, "sh")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ref


def _is_static(path: Path) -> bool:
    if not path.is_file():
        return False
    r = subprocess.run(["ldd", str(path)], capture_output=True, text=True)
    return r.returncode != 0 or "not a dynamic executable" in (r.stdout + r.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.images", description=__doc__.split("\n")[0])
    ap.add_argument("which", nargs="*", metavar="debian|busybox|multiarch", help="default: all three")
    ap.add_argument("--force", action="store_true", help="rebuild even when the image exists")
    args = ap.parse_args(argv)
    which = args.which or ["debian", "busybox", "multiarch"]
    if set(which) - {"debian", "busybox", "multiarch"}:
        ap.error(f"unknown image(s): {' '.join(sorted(set(which) - {'debian', 'busybox', 'multiarch'}))}")
    if not docker_available():
        print("tests.images: docker engine not answering (run scripts/install-engine.sh)",
              file=sys.stderr)
        return 1
    try:
        if "debian" in which:
            print(ensure_debian_image(force=args.force))
        if "busybox" in which:
            print(ensure_busybox_image(force=args.force))
        if "multiarch" in which:
            print(ensure_multiarch_image(force=args.force))
    except (ImageError, subprocess.CalledProcessError) as e:
        print(f"tests.images: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
