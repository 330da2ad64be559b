"""Local base images for the Docker tests; no registry is ever contacted.

Nothing can be pulled on the test machines, so the images builds start FROM are made here:

* ``buildkit-test/debian:bookworm``: ``debootstrap --variant=minbase bookworm`` imported with
  ``docker import``. The mirror is the machine's own apt source, read at run time from
  /etc/apt/sources.list.d/debian.sources (or /etc/apt/sources.list); no host name is written here.
* ``buildkit-test/debian-multiarch:bookworm``: one local image of two platforms (an OCI index), for
  cross builds: the amd64 image above, and arm64 made with ``debootstrap --foreign --arch=arm64``,
  which only unpacks the packages (no arm64 code runs, so no QEMU is needed). dpkg's status file is
  written from the unpacked packages' control fields, as the second stage would have.
* ``buildkit-test/debian-multiarch:trixie``: the same two platforms of Debian 13, whose GCC 14 compiles
  llama.cpp's armv9.2 (SME) CPU variants (the real tree's default CPU level for arm64).
* ``buildkit-test/busybox:latest``: the static busybox of the host (package busybox-static) and its
  applet links, for tiny cases.

Both are skipped when the image already exists. A Dockerfile ``FROM`` either works with
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

DEBIAN_IMAGE = "buildkit-test/debian:bookworm"
BUSYBOX_IMAGE = "buildkit-test/busybox:latest"
MULTIARCH_IMAGE = "buildkit-test/debian-multiarch:bookworm"
# the same, with its arm64 half configured (debootstrap's second stage, run under QEMU): an emulated arm64
# build stage runs apt in it (the unpack-only half has no users, no configured keyring for apt)
CONFIGURED_MULTIARCH_IMAGE = "buildkit-test/debian-multiarch-configured:bookworm"
# Debian 13: GCC 14, natively and as a cross compiler (tests/e2e/test_e2e_cross.py)
TRIXIE_MULTIARCH_IMAGE = "buildkit-test/debian-multiarch:trixie"
FOREIGN_ARCH = "arm64"
DEBIAN_SUITE = "bookworm"

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_DEB822_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
_ONE_LINE_SOURCES = Path("/etc/apt/sources.list")


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


def _making(ref: str):
    """An exclusive lock held while `ref` is made: test processes running side by side (pytest-xdist's
    workers, a second tier) make each base once; the others wait, then find it."""
    from buildkit.core.filelock import file_lock

    name = re.sub(r"[^A-Za-z0-9._-]", "_", ref)
    return file_lock(Path(tempfile.gettempdir()) / "llama-buildkit-test-images" / f"{name}.lock",
                     on_wait=lambda: _log(f"waiting for another test process making {ref}"))


def debian_mirror(deb822: Path = _DEB822_SOURCES, one_line: Path = _ONE_LINE_SOURCES,
                  suite: str = DEBIAN_SUITE) -> str:
    """The URI of the machine's main Debian archive (the stanza carrying ``suite``)."""
    if deb822.is_file():
        for stanza in re.split(r"\n\s*\n", deb822.read_text()):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "deb" not in fields.get("types", "").split():
                continue
            if suite in fields.get("suites", "").split() and fields.get("uris"):
                return fields["uris"].split()[0]
    if one_line.is_file():
        for line in one_line.read_text().splitlines():
            # deb [options] URI suite components...
            m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
            if m and m.group(2) == suite:
                return m.group(1)
    raise ImageError(f"no apt source for Debian {suite} in {deb822} or {one_line}")


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


def _empty_dev(root: Path) -> None:
    """Empty the rootfs's /dev: docker supplies it."""
    for p in (root / "dev").iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def ensure_debian_image(ref: str = DEBIAN_IMAGE, *, force: bool = False, suite: str = DEBIAN_SUITE) -> str:
    """Make ``ref`` from ``debootstrap --variant=minbase <suite>`` unless it exists; returns ref. Every suite
    comes from the machine's own Debian mirror (the one serving bookworm serves them all)."""
    if not force and image_exists(ref):
        return ref
    with _making(ref):
        if not force and image_exists(ref):  # made by another test process while this one waited
            return ref
        return _make_debian_image(ref, suite)


def _make_debian_image(ref: str, suite: str) -> str:
    _need_debootstrap(ref)
    mirror = debian_mirror()
    work = Path(tempfile.mkdtemp(prefix="buildkit-debootstrap-"))
    try:
        root = work / "rootfs"
        _log(f"debootstrap --variant=minbase {suite} from the machine's apt source")
        r = subprocess.run(["debootstrap", "--variant=minbase", suite, str(root), mirror],
                           capture_output=True, text=True)
        if r.returncode != 0:
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
            raise ImageError(f"debootstrap failed:\n{tail}")
        # Smaller image, same content as a fresh `docker pull debian:bookworm`-like base.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            d = root / sub
            for p in d.glob("*"):
                if p.is_file() and p.name not in ("lock",):
                    p.unlink()
        _empty_dev(root)
        _log(f"docker import -> {ref}")
        _import_dir(root, ref, "bash")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ref


def _installed_status(root: Path) -> str:
    """dpkg's status file for the packages debootstrap's first stage unpacked under root."""
    stanzas = []
    for deb in sorted((root / "var/cache/apt/archives").glob("*.deb")):
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
        lines = control.rstrip("\n").splitlines()
        lines.insert(1, "Status: install ok installed")
        stanzas.append("\n".join(lines))
    return "\n\n".join(stanzas) + "\n"


def _foreign_first_stage(root: Path, arch: str, suite: str = DEBIAN_SUITE) -> None:
    r = subprocess.run(["debootstrap", "--foreign", f"--arch={arch}", "--variant=minbase", suite, str(root),
                        debian_mirror()], capture_output=True, text=True)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        raise ImageError(f"debootstrap --foreign --arch={arch} failed:\n{tail}")
    proc = root / "proc"  # the first stage leaves proc -> /proc (for a chroot); a container needs a folder
    if proc.is_symlink():
        proc.unlink()
        proc.mkdir(mode=0o555)
    _empty_dev(root)


def _foreign_rootfs(root: Path, arch: str, suite: str = DEBIAN_SUITE) -> None:
    """An unpack-only root of `arch`: nothing of it runs (dpkg's status written from the packages)."""
    _foreign_first_stage(root, arch, suite)
    (root / "var/lib/dpkg/status").write_text(_installed_status(root))
    shutil.rmtree(root / "debootstrap")
    for p in (root / "var/cache/apt/archives").glob("*.deb"):
        p.unlink()


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
        imp = subprocess.run(["docker", "import", "--platform", f"linux/{arch}", "--change", f"ENV PATH={_DEFAULT_PATH}",
                              "--change", 'CMD ["bash"]', "-", ref], stdin=export.stdout, capture_output=True, text=True)
        assert export.stdout is not None
        export.stdout.close()
        if export.wait() != 0 or imp.returncode != 0:
            raise ImageError(f"docker import of {ref} failed: {imp.stderr.strip()}")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        subprocess.run(["docker", "rmi", stage1], capture_output=True)


def _saved_manifest(ref: str, work: Path, blobs: Path) -> dict:
    """docker save of a one-platform image: its blobs copied into blobs/, its manifest descriptor returned."""
    import json
    import tarfile

    archive = work / "saved.tar"
    subprocess.run(["docker", "save", ref, "-o", str(archive)], check=True, capture_output=True)
    out = work / "saved"
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="data")
    for blob in (out / "blobs" / "sha256").iterdir():
        shutil.copy2(blob, blobs / blob.name)
    desc = json.loads((out / "index.json").read_text())["manifests"][0]
    config = json.loads((blobs / json.loads((blobs / desc["digest"].split(":")[1]).read_text())
                         ["config"]["digest"].split(":")[1]).read_text())
    shutil.rmtree(out)
    archive.unlink()
    return {"mediaType": desc["mediaType"], "digest": desc["digest"], "size": desc["size"],
            "platform": {"architecture": config["architecture"], "os": config["os"]}}


def ensure_multiarch_image(ref: str = MULTIARCH_IMAGE, *, force: bool = False, configured: bool = False,
                           suite: str = DEBIAN_SUITE) -> str:
    """Make ``ref``, an OCI index of the amd64 Debian image and an arm64 one (of `suite`), unless it exists.
    configured: the arm64 half goes through debootstrap's second stage, under QEMU (registered by the
    caller); otherwise it is only unpacked, and nothing of arm64 runs."""
    if not force and image_exists(ref):
        return ref
    with _making(ref):
        if not force and image_exists(ref):
            return ref
        return _make_multiarch_image(ref, configured, suite)


def _make_multiarch_image(ref: str, configured: bool, suite: str) -> str:
    import hashlib
    import json

    _need_debootstrap(ref)
    native = ensure_debian_image() if suite == DEBIAN_SUITE else \
        ensure_debian_image(f"buildkit-test/debian:{suite}", suite=suite)
    work = Path(tempfile.mkdtemp(prefix="buildkit-multiarch-"))
    foreign = f"buildkit-test/debian-{FOREIGN_ARCH}-{'configured' if configured else 'only'}:{suite}"
    try:
        if configured:
            _log(f"debootstrap --foreign --arch={FOREIGN_ARCH}, then its second stage under emulation")
            _configured_foreign_image(work, FOREIGN_ARCH, foreign, suite)
        else:
            _log(f"debootstrap --foreign --arch={FOREIGN_ARCH} (unpack only, nothing of {FOREIGN_ARCH} runs)")
            _foreign_rootfs(work / "rootfs", FOREIGN_ARCH, suite)
            _import_dir(work / "rootfs", foreign, "bash", platform=f"linux/{FOREIGN_ARCH}")
            shutil.rmtree(work / "rootfs")
        layout = work / "layout"
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        manifests = [_saved_manifest(native, work, blobs), _saved_manifest(foreign, work, blobs)]
        index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                            "manifests": manifests}, separators=(",", ":")).encode()
        digest = hashlib.sha256(index).hexdigest()
        (blobs / digest).write_bytes(index)
        name, _, tag = ref.rpartition(":")
        (layout / "index.json").write_text(json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": f"sha256:{digest}",
                           "size": len(index), "annotations": {"io.containerd.image.name": f"docker.io/{ref}",
                                                               "org.opencontainers.image.ref.name": tag}}]}))
        (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        archive = work / "multiarch.tar"
        subprocess.run(["tar", "-C", str(layout), "-cf", str(archive), "."], check=True)
        r = subprocess.run(["docker", "load", "-i", str(archive)], capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageError(f"docker load of {ref} failed: {r.stderr.strip()}")
        _log(f"{ref}: linux/amd64 + linux/{FOREIGN_ARCH} (sha256:{digest[:12]})")
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
        for tag in image.tags:
            if tag.startswith(repository + ":"):
                try:
                    client.images.remove(tag, force=True)
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
