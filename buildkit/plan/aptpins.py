"""Debian packages pinned to a recorded build's versions (issue 41, item 5), and base.apt_snapshot.

A build records every Debian package of its build stage and of its runtime image with its version (the
lock's debian_packages; flows/unit/debpackages.py reads them from the stages' own dpkg status). `reproduce`
gives the plan these as AptPins, and render.py writes, per stage, a script and an apt preferences file
into the build context's apt-pins/ folder, which that stage's apt step bind-mounts at /mnt. The script
checks, with `apt-cache madison`, that the mirror still has each recorded version not installed already;
when one is gone it prints ONE line (buildx.py's REFUSED, then the packages, their recorded versions and
what the mirror has) and stops the step; else the install runs with the preferences, which hold every
recorded package at its version (priority 1001: the named packages and their dependencies alike).

Why a mount and not `pkg=version` words on the RUN line: a RUN line's text is the image config's history
(created_by) of the runtime stage, so pinned words would give the reproduction another manifest digest
than the build it reproduces, whose apt step had no versions. A mount's flags are not in the history, so
the RUN lines' text is the same with and without pins, and so are the image's bytes when the versions are.

Nothing here is a build input (the versions are known only after the apt step). base.apt_snapshot is: a
date whose Debian archive state snapshot.debian.org serves, so that the mirror does not move at all.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from buildkit.core.errors import ConfigError

REFUSED = "buildkit-refused:"  # what the refusal line starts with in the build's log (engine/buildx.py)
_SNAPSHOT = re.compile(r"(\d{8}T\d{6}Z)|(\d{4}-\d{2}-\d{2})")
_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?")
_VERSION = re.compile(r"[A-Za-z0-9.+~:-]+")


@dataclass(frozen=True)
class AptPins:
    """The recorded versions of one build: (package, version) pairs of the build stage and of the runtime
    image, sorted; a package of several architectures is named package:arch."""
    build: tuple[tuple[str, str], ...] = ()
    runtime: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.build or self.runtime)


def check_apt_snapshot(value: str) -> str:
    """base.apt_snapshot as snapshot.debian.org names it (YYYYMMDDTHHMMSSZ); "" when unset. A date
    YYYY-MM-DD means its midnight (UTC). ConfigError for anything else, or a date that does not exist."""
    value = value.strip()
    if not value:
        return ""
    match = _SNAPSHOT.fullmatch(value)
    try:
        if match and match.group(1):
            return datetime.strptime(value, "%Y%m%dT%H%M%SZ").strftime("%Y%m%dT%H%M%SZ")
        if match:
            return datetime.strptime(value, "%Y-%m-%d").strftime("%Y%m%dT000000Z")
    except ValueError:
        pass
    raise ConfigError(f"base.apt_snapshot {value!r} is not a date of snapshot.debian.org: write YYYY-MM-DD "
                      "or YYYYMMDDTHHMMSSZ (UTC), e.g. 2026-11-01 or 20261101T120000Z")


def keyed_packages(packages: Iterable[tuple[str, str, str]]) -> dict[str, tuple[str, str, str]]:
    """(name, architecture, version) triples by the key the lock records each under: the name, or for a name
    installed for several architectures (a cross build's libc6 and libc6:arm64) name:arch for each."""
    items = sorted(set(packages))
    archs: dict[str, set[str]] = {}
    for name, arch, _ in items:
        archs.setdefault(name, set()).add(arch)
    return {(f"{name}:{arch}" if len(archs[name]) > 1 and arch else name): (name, arch, version)
            for name, arch, version in items}


def package_versions(packages: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """{package: version} of (name, architecture, version) triples, as the lock records them (keyed_packages)."""
    return {key: triple[2] for key, triple in keyed_packages(packages).items()}


def pins_from_record(record: Mapping[str, object] | None, where: str) -> AptPins | None:
    """The pins of a lock entry's debian_packages ({"build": {...}, "runtime": {...}}); None without one.
    A name or version that apt would not take is a ConfigError naming where (it reaches a RUN line)."""
    if not record:
        return None
    stages = []
    for stage in ("build", "runtime"):
        found = record.get(stage) or {}
        if not isinstance(found, Mapping):
            raise ConfigError(f"{where}: debian_packages.{stage}: expected an object of package: version")
        for name, version in found.items():
            if not (isinstance(version, str) and _NAME.fullmatch(str(name)) and _VERSION.fullmatch(version)):
                raise ConfigError(f"{where}: debian_packages.{stage}: {str(name)[:60]!r} = {str(version)[:60]!r} "
                                  "is not a Debian package name and version")
        stages.append(tuple(sorted((str(n), str(v)) for n, v in found.items())))
    return AptPins(build=stages[0], runtime=stages[1])


PINS_MOUNT = "/mnt"  # where a stage's apt-pins/<stage>/ folder is mounted (it exists, empty, in Debian and Ubuntu)
SCRIPT = "buildkit-apt-pins"  # sourced by the apt step when mounted: the check, then pins="-o ..." for apt-get


def preferences(pins: Iterable[tuple[str, str]]) -> str:
    """An apt preferences file that holds every package at its recorded version (priority 1001: also a
    downgrade, and over any newer version the mirror offers)."""
    return "".join(f"Package: {name}\nPin: version {version}\nPin-Priority: 1001\n\n" for name, version in pins)


def check_script(pins: Iterable[tuple[str, str]]) -> str:
    """The POSIX sh the apt step sources after `apt-get update` (its "$@" are apt's options, $admindir a
    dpkg database other than the stage's own): the check of every recorded version that is not installed
    already, then pins, the apt-get options that read the preferences."""
    words = " ".join(shlex.quote(f"{name}={version}") for name, version in pins)
    return f"""# buildkit reproduce: the recorded Debian package versions (plan/aptpins.py)
missing=
for pv in {words}; do
  p="${{pv%%=*}}"; v="${{pv#*=}}"
  now=$(dpkg-query ${{admindir:+--admindir=$admindir}} -W -f '${{Version}}' "$p" 2>/dev/null)
  if [ "$now" = "$v" ]; then continue; fi
  have=$(apt-cache "$@" madison "$p" 2>/dev/null | awk -F'|' '{{gsub(/ /, "", $2); print $2}}' | sort -u | paste -sd, -)
  case ",$have," in *",$v,"*) ;; *) missing="${{missing:+$missing; }}$p $v (the mirror has ${{have:-none}})" ;; esac
done
if [ -n "$missing" ]; then
  echo "{REFUSED} {refusal_words('$missing')}"
  exit 1
fi
echo "buildkit: apt pins: $(grep -c '^Package:' {PINS_MOUNT}/preferences) packages held at their recorded versions"
pins="-o Dir::Etc::Preferences={PINS_MOUNT}/preferences"
"""


def stage_files(pins: AptPins, same_base: bool) -> dict[str, str]:
    """The apt-pins/ folder of the build context: build/ and runtime/, each a script and a preferences file,
    for the stages that have pins. The build stage checks the runtime's versions too where both stages
    are the same image (same_base): the runtime stage runs beside the compile, the build stage before it."""
    files = {}
    early = tuple(dict(pins.build + (pins.runtime if same_base else ())).items())
    for stage, held, checked in (("build", pins.build, early), ("runtime", pins.runtime, pins.runtime)):
        if held:
            files[f"{stage}/{SCRIPT}"] = check_script(checked)
            files[f"{stage}/preferences"] = preferences(held)
    return files


def refusal_words(missing: str) -> str:
    return (f"the Debian mirror no longer has the recorded versions: {missing}; point base.apt_snapshot at the "
            "recorded build's date (snapshot.debian.org) or a mirror that has them")


def refusal(missing: Iterable[tuple[str, str, str]]) -> str:
    """The one line of a reproduction whose recorded versions the mirror lacks: (package, recorded, what
    the mirror has, comma-separated) each, as the script prints it after REFUSED."""
    return refusal_words("; ".join(f"{name} {recorded} (the mirror has {have or 'none'})"
                                   for name, recorded, have in missing))
