"""`buildkit base debian`: a Debian base image made here from Debian's packages, for a machine that
cannot reach docker.io (or any registry): `debootstrap --variant=minbase SUITE` of each platform,
written as an OCI image of one layer and loaded into the engine, one platform as an image, two as
an OCI index of both (what a cross build's base must offer, `engine/baseimages.check_base_platforms`).

* This machine's platform is debootstrapped whole: its packages unpacked and configured (dpkg runs
  their scripts in a chroot), then apt's package cache and lists are emptied and /dev left to the
  engine, as in Debian's own images.
* Another platform (arm64 on an amd64 machine) runs nothing here: `debootstrap --foreign` only unpacks
  its packages, and dpkg's status is written from their control fields, as the second stage would
  have. That is what a cross build needs of it (its target stages only COPY; `runtime-packages`
  resolves packages against that status). A build whose compile runs on that platform under
  emulation needs it configured, which only QEMU can do (tests/images.py's configured form).
* Packages come from the mirror given, else this machine's own Debian source (apt's deb822 or
  one-line list), else deb.debian.org; nothing is pulled from any registry.
* Layer and configuration are written by buildkit (no `docker import`): a tar of the root sorted by
  name with numeric owners; `PATH` and `CMD ["bash"]` set as in Debian's images. The configuration's
  `created` and its history entry's are one fixed time, the `Date` of the suite's Release file that
  debootstrap fetched (the archive's state the packages are from; the Unix epoch where it has none),
  never the time of the run: BuildKit gives a history entry without a time the time its own cache first
  held the layer, so an image built on the base would differ on an engine that has not seen it
  (issue 47). engine/baseimages.check_base_history refuses a base without them.

Needs root (debootstrap), debootstrap and dpkg-deb (Debian's packages of those names), and the
engine. Errors are BaseImageError, one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from pathlib import Path

from buildkit.core import children
from buildkit.core.boundedread import read_regular
from buildkit.core.errors import BaseImageError, BuildkitError
from buildkit.core.platforms import cpu_arch, machine_arch
from buildkit.core.treewalk import remove_tree
from buildkit.core.wholefile import scratch_dir
from buildkit.engine.api import Engine
from buildkit.oci.ociindex import IMAGE_NAME, REF_NAME, write_index_archive
from buildkit.oci.imageref import parse_image_ref

SUITES = ("bookworm", "trixie")  # Debian 12 (GCC 12) and 13 (GCC 14: arm64's SME variants, znver4)
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEB822_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
ONE_LINE_SOURCES = Path("/etc/apt/sources.list")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EPOCH = "1970-01-01T00:00:00Z"  # a base's time when its Release file gives none
RELEASE_LIMIT = 1 << 20  # a suite's Release file (bookworm's: about 150 KB)
WORK_PREFIX = "buildkit-base-"  # the work folder in the temporary folder: buildkit-base-<pid>-<random>-<suite>


@dataclass(frozen=True)
class DebianBase:
    """What to make: a suite, its platforms (this machine's configured, others unpacked), the tag."""
    suite: str
    platforms: tuple[str, ...]  # linux/amd64, linux/arm64, in the order asked
    tag: str
    mirror: str


@dataclass(frozen=True)
class BaseMade:
    tag: str
    digest: str  # the manifest's (one platform) or the index's (two)
    configured: tuple[str, ...]  # platforms debootstrapped whole
    unpacked: tuple[str, ...]  # platforms only unpacked (--foreign)


def _is_main_archive(suites: Sequence[str]) -> bool:
    return any(s and "-" not in s for s in suites)  # bookworm, not bookworm-security / -updates


def machine_mirror(deb822: Path = DEB822_SOURCES, one_line: Path = ONE_LINE_SOURCES) -> str | None:
    """The URI of this machine's main Debian archive (the first `deb` source of a plain suite), if any."""
    if deb822.is_file():
        for stanza in re.split(r"\n\s*\n", deb822.read_text()):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("uris") and \
                    _is_main_archive(fields.get("suites", "").split()):
                return fields["uris"].split()[0]
    if one_line.is_file():
        for line in one_line.read_text().splitlines():
            match = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)  # deb [options] URI suite ...
            if match and _is_main_archive([match.group(2)]):
                return match.group(1)
    return None


def plan_base(suite: str, platforms: str, tag: str, mirror: str | None = None) -> DebianBase:
    """Check what was asked (pure but for reading apt's sources when no mirror is given)."""
    if suite not in SUITES:
        raise BaseImageError(f"--suite {suite!r}: buildkit makes Debian {' or '.join(SUITES)}")
    wanted = tuple(p.strip() for p in platforms.split(",") if p.strip())
    if not wanted:
        raise BaseImageError("--platform names no platform (linux/amd64, linux/arm64 or both, comma-separated)")
    try:
        for p in wanted:
            cpu_arch(p)
        ref = parse_image_ref(tag)
    except BuildkitError as exc:
        raise BaseImageError(str(exc)) from None
    if len(set(wanted)) != len(wanted):
        raise BaseImageError(f"--platform {platforms!r} names a platform twice")
    if ref.digest or not ref.tag:
        raise BaseImageError(f"--tag {tag!r}: give NAME:TAG (no digest), e.g. local/debian:{suite}")
    url = mirror or machine_mirror() or DEFAULT_MIRROR
    if not re.match(r"^(https?|file)://\S+$", url):
        raise BaseImageError(f"--mirror {url!r} is not an http(s):// or file:// URL of a Debian archive")
    return DebianBase(suite, wanted, tag, url)


def _run(argv: Sequence[str], what: str) -> str:
    """Run a tool in a process group of its own; its output, or BaseImageError with its last lines."""
    try:
        proc = children.start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        raise BaseImageError(f"{what}: {exc}") from None
    out: str
    try:
        out, _ = proc.communicate()
    finally:
        children.finish(proc)
    if proc.returncode != 0:
        tail = " | ".join(line.strip() for line in out.strip().splitlines()[-4:])
        raise BaseImageError(f"{what} failed (exit {proc.returncode}): {tail or 'no output'}")
    return out


def _need_tools(foreign: bool) -> None:
    if os.geteuid() != 0:
        raise BaseImageError("making a Debian base needs root (debootstrap unpacks packages as their owners)")
    for tool in ("debootstrap",) + (("dpkg-deb",) if foreign else ()):
        if shutil.which(tool) is None:
            raise BaseImageError(f"{tool} is not installed here: `apt-get install debootstrap` (Debian's package)")


def _empty_dev(root: Path) -> None:
    for entry in (root / "dev").iterdir():  # the engine supplies /dev
        remove_tree(entry)


def release_time(root: Path, suite: str) -> str:
    """The `Date` of the suite's Release file debootstrap left under root, as RFC 3339 in UTC; EPOCH when there
    is none or it cannot be read (a mirror's file: read bounded, a malformed date is not taken)."""
    for path in sorted((root / "var/lib/apt/lists").glob(f"*_dists_{suite}_Release")):
        try:
            text = read_regular(path, RELEASE_LIMIT).decode(errors="replace")
        except OSError:  # not a regular file, over the limit, gone
            continue
        for line in text.splitlines():
            if line.startswith("Date:"):
                try:
                    when = parsedate_to_datetime(line.removeprefix("Date:").strip())
                except (TypeError, ValueError, IndexError):
                    break
                if when.tzinfo is not None:
                    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                break
    return EPOCH


def configured_root(root: Path, suite: str, mirror: str) -> str:
    """This machine's platform, debootstrapped whole, without apt's cache and lists; its release_time."""
    _run(["debootstrap", "--variant=minbase", suite, str(root), mirror], f"debootstrap {suite}")
    created = release_time(root, suite)
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (root / sub).glob("*"):
            if entry.is_file() and entry.name != "lock":
                entry.unlink()
    _empty_dev(root)
    return created


def installed_status(root: Path) -> str:
    """dpkg's status file for the packages debootstrap's first stage unpacked under root."""
    stanzas = []
    for deb in sorted((root / "var/cache/apt/archives").glob("*.deb")):
        lines = _run(["dpkg-deb", "-f", str(deb)], f"dpkg-deb -f {deb.name}").rstrip("\n").splitlines()
        lines.insert(1, "Status: install ok installed")
        stanzas.append("\n".join(lines))
    return "\n\n".join(stanzas) + "\n"


def foreign_first_stage(root: Path, suite: str, mirror: str, dpkg_arch: str) -> None:
    """debootstrap's first stage of another platform: its packages downloaded and unpacked, nothing run;
    proc a folder and /dev empty, as a container wants them (its second stage can run in one, under QEMU)."""
    _run(["debootstrap", "--foreign", f"--arch={dpkg_arch}", "--variant=minbase", suite, str(root), mirror],
         f"debootstrap --foreign --arch={dpkg_arch} {suite}")
    proc = root / "proc"  # the first stage leaves proc -> /proc (for a chroot); a container needs a folder
    if proc.is_symlink():
        proc.unlink()
        proc.mkdir(mode=0o555)
    _empty_dev(root)


def unpacked_root(root: Path, suite: str, mirror: str, dpkg_arch: str) -> str:
    """Another platform's root, only unpacked: nothing of it runs here (dpkg's status written from the packages);
    its release_time."""
    foreign_first_stage(root, suite, mirror, dpkg_arch)
    created = release_time(root, suite)
    (root / "var/lib/dpkg/status").write_text(installed_status(root))
    remove_tree(root / "debootstrap")
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    return created


def _blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def _document(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def root_layout(root: Path, platform: str, layout: Path, history: str, created: str = EPOCH) -> None:
    """An OCI image layout folder of one image: root as its one (uncompressed) layer; created (RFC 3339) is the
    time of its configuration and its history entry."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layer = layout / "layer.tar"
    _run(["tar", "--numeric-owner", "--sort=name", "-C", str(root), "-cf", str(layer), "."], f"tar of {root}")
    sha = hashlib.sha256()
    with open(layer, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    size = layer.stat().st_size
    layer.replace(blobs / sha.hexdigest())
    layer_digest = f"sha256:{sha.hexdigest()}"
    arch = cpu_arch(platform)
    config = {"architecture": arch.docker, "os": "linux", "created": created,
              "config": {"Env": [f"PATH={DEFAULT_PATH}"], "Cmd": ["bash"]},
              "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
              "history": [{"created": created, "created_by": history}]}
    config_digest, config_size = _blob(blobs, _document(config))
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config_size},
                "layers": [{"mediaType": OCI_LAYER, "digest": layer_digest, "size": size}]}
    digest, msize = _blob(blobs, _document(manifest))
    (layout / "oci-layout").write_bytes(_document({"imageLayoutVersion": "1.0.0"}))
    (layout / "index.json").write_bytes(_document({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": digest, "size": msize}]}))


def _single_archive(layout: Path, dest: Path, tag: str) -> str:
    """The layout as an OCI archive whose index.json names the tag (docker load tags it); its manifest digest."""
    index = json.loads((layout / "index.json").read_text())
    descriptor = index["manifests"][0]
    name = str(parse_image_ref(tag))
    descriptor["annotations"] = {IMAGE_NAME: name, REF_NAME: name.rsplit(":", 1)[-1]}
    (layout / "index.json").write_bytes(_document(index))
    with tarfile.open(dest, "w") as tar:
        for entry in ("oci-layout", "index.json", "blobs"):
            tar.add(layout / entry, arcname=entry)
    return str(descriptor["digest"])


def _mounts_below(folder: Path) -> list[str]:
    """Mount points inside folder (debootstrap mounts /proc, /sys or /dev in the root while it configures)."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    prefix = str(folder.resolve()) + "/"
    points = [line.split()[1].replace("\\040", " ") for line in lines if len(line.split()) > 1]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


def remove_work(work: Path) -> None:
    """Remove the work folder, never through a mount debootstrap left (an interrupted run): unmount first,
    and keep the folder when a mount stays."""
    for point in _mounts_below(work):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
    if _mounts_below(work):
        raise BaseImageError(f"{work} still has mounts inside ({', '.join(_mounts_below(work))}); "
                             "unmount them and remove it by hand")
    remove_tree(work, ignore_errors=True)


def make_base(base: DebianBase, engine: Engine, *, log: Callable[[str], None] = lambda _: None,
              work_dir: Path | None = None) -> BaseMade:
    """Debootstrap each platform, write its OCI image, load the image (or the index of both) under base.tag."""
    here = machine_arch()
    foreign = [p for p in base.platforms if cpu_arch(p).docker != here]
    _need_tools(bool(foreign))
    engine.ping()
    # buildkit-base-<pid>-<random>-<suite>, flocked while used: what a killed run left (207 MiB mid-debootstrap,
    # perhaps with /proc mounted inside) is swept by the next run, its mounts undone first (remove_work)
    with scratch_dir(work_dir or tempfile.gettempdir(), base.suite, prefix=WORK_PREFIX, remove=remove_work) as work:
        return _made(base, work, foreign, engine, log)


def _made(base: DebianBase, work: Path, foreign: list[str], engine: Engine,
          log: Callable[[str], None]) -> BaseMade:
    """make_base's work in its scratch folder: each platform's root, its OCI layout, the archive loaded."""
    layouts: list[tuple[str, Path]] = []
    for platform in base.platforms:
        arch = cpu_arch(platform)
        root = work / f"root-{arch.docker}"
        if platform in foreign:
            log(f"debootstrap --foreign --arch={arch.dpkg} {base.suite} from {base.mirror} (unpacked only: "
                f"nothing of {platform} runs here)")
            created = unpacked_root(root, base.suite, base.mirror, arch.dpkg)
        else:
            log(f"debootstrap --variant=minbase {base.suite} from {base.mirror}")
            created = configured_root(root, base.suite, base.mirror)
        layout = work / f"layout-{arch.docker}"
        root_layout(root, platform, layout, f"buildkit base debian --suite {base.suite} ({platform}"
                    + (", unpacked only)" if platform in foreign else ")"), created)
        remove_work(root)
        layouts.append((platform, layout))
    archive = work / "base.oci.tar"
    if len(layouts) == 1:
        digest = _single_archive(layouts[0][1], archive, base.tag)
    else:
        digest = write_index_archive(layouts, archive, [str(parse_image_ref(base.tag))])
    log(f"docker load -> {base.tag}")
    engine.load(archive, [base.tag])
    return BaseMade(base.tag, digest, tuple(p for p in base.platforms if p not in foreign), tuple(foreign))
