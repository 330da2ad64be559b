"""Image tag names (pure). The full semver scheme for publishing builds on these names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import semver

from buildkit.core.errors import ConfigError
from buildkit.core.platforms import DEFAULT_PLATFORM, cpu_arch
from buildkit.oci.imageref import InvalidReference, is_tag, parse_repository
from buildkit.plan.archs import Arch
from buildkit.plan.cpulevels import LEVELS


def variant(arch: Arch, cuda_version: str | None) -> str:
    """cuda13.1-sm120 for a CUDA arch, cpu for the CPU image."""
    if not arch.is_cuda:
        return "cpu"
    return f"cuda{cuda_version}-sm{arch.number}"


DEFAULT_TARGET = "server"  # the target whose variant name carries no suffix


def target_variant(variant_name: str, target: str) -> str:
    """The variant as tags name it: cuda13.1-sm120 for the server, cuda13.1-sm120-full for the full image.
    The one name build, tags, push, bake and nightly give a variant."""
    return variant_name if target == DEFAULT_TARGET else f"{variant_name}-{target}"


def platform_suffix(platform: str, default: str = DEFAULT_PLATFORM) -> str:
    """What a single-platform artifact's tags and lock key add for its platform: nothing for the default
    platform (linux/amd64), -arm64 for linux/arm64 (the convention of llama.cpp's and ollama's images: the plain
    name is the default or a multi-platform index, another single platform is named). An arm64-only build so
    never shares a tag or a lock key with the amd64 one; a build of several platforms stays one index under
    the plain name. `default` is the arch's own default platform (plan/archs.py default_platform): sm_121
    exists on arm64 only, so its arm64 build is its plain name."""
    return "" if cpu_arch(platform).docker == cpu_arch(default).docker else f"-{cpu_arch(platform).docker}"


def artifact_variant(tag_variant: str, platform: str, cpu_level: str = "", default: str = DEFAULT_PLATFORM) -> str:
    """The variant as a single-platform build's tags and lock key name it: cpu, cpu-arm64, cpu-full-arm64.
    A CPU level of one platform (cpu-neoverse-v2, cpu-x86-64-v3) already names it: no suffix; all, none and
    native (levels of either platform) do not."""
    level = LEVELS.get(cpu_level)
    if level is not None and level.platform_arch is not None:
        return tag_variant
    return f"{tag_variant}{platform_suffix(platform, default)}"


def check_tag(tag: str) -> str:
    if not is_tag(tag):
        raise ConfigError(f"tag {tag!r} is not a valid Docker tag "
                          "(letters, digits, '_', '.', '-'; at most 128 characters; no '+')")
    return tag


def check_repository(name: str) -> str:
    """image.name, as written, when it is `[registry/]repository` by the grammar publish uses too."""
    try:
        parse_repository(name)
    except InvalidReference as exc:
        raise ConfigError(f"image name {name!r} is not a valid repository name ({exc.why}; "
                          "lowercase letters, digits and separators, optionally registry/...)") from None
    return name


def build_tags(repository: str, variant_name: str, commit: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Tags a local build gets: <variant>, sha-<7>-<variant>, plus any extra tags asked for.
    (Once its build key is known, the pipeline adds build_key_tag: the one tag no other build takes.)"""
    check_repository(repository)
    names = [variant_name, f"sha-{commit[:7]}-{variant_name}", *extra]
    seen: list[str] = []
    for name in names:
        if name not in seen:
            seen.append(check_tag(name))
    return tuple(f"{repository}:{name}" for name in seen)


@dataclass(frozen=True)
class TagSet:
    """The tags of one published build. Immutable tags must never move to another digest. roles: each tag's
    role (plan/tagset.py ROLES: version, sha, build_key, nightly, variant, latest, extra), which is what
    publishing goes by (the build-key tag last, a sha tag first come), never a tag's spelling."""
    immutable: tuple[str, ...]
    moving: tuple[str, ...]
    roles: tuple[tuple[str, str], ...] = ()  # (tag, role)

    @property
    def all(self) -> tuple[str, ...]:
        return self.immutable + self.moving

    def role(self, tag: str) -> str:
        """tag's role ("" for a tag of this set whose role was not given)."""
        return dict(self.roles).get(tag, "")

    def only(self, tags: tuple[str, ...]) -> TagSet:
        """These of the set's tags, with their kinds and roles."""
        return TagSet(tuple(t for t in self.immutable if t in tags), tuple(t for t in self.moving if t in tags),
                      tuple((t, r) for t, r in self.roles if t in tags))

    def plus(self, tag: str, role: str, *, immutable: bool) -> TagSet:
        """The set with one more tag (its name checked against Docker's grammar)."""
        if tag in self.all:
            return self
        check_tag(tag)
        if immutable:
            return TagSet(self.immutable + (tag,), self.moving, self.roles + ((tag, role),))
        return TagSet(self.immutable, self.moving + (tag,), self.roles + ((tag, role),))


def normalise_version(text: str) -> str:
    """v1.2.3 is 1.2.3, as docker/metadata-action's type=semver has it (a git tag's v is stripped);
    anything else is returned as given (parse_version judges it)."""
    if isinstance(text, str) and len(text) > 1 and text[0] in "vV" and text[1].isdigit():
        return text[1:]
    return text


def parse_version(text: str) -> semver.Version:
    """X.Y.Z[-PRERELEASE], a leading v allowed (normalise_version)."""
    try:
        return semver.Version.parse(normalise_version(text))
    except (ValueError, TypeError):
        raise ConfigError(f"version {text!r} is not semver (MAJOR.MINOR.PATCH[-PRERELEASE])") from None


def build_key_tag(build_key: str, variant_name: str) -> str:
    """The tag under which a build with these exact inputs is found again in the registry."""
    return f"bk-{build_key[:24]}-{variant_name}"


TagKind = Literal["immutable", "moving"]  # an immutable tag never moves to another digest


@dataclass(frozen=True)
class TagRule:
    """A tag a publish writes whose name is known only then (or only to another command)."""
    pattern: str
    kind: TagKind
    when: str


def publish_rules(variant_name: str, commit: str | None = None) -> tuple[TagRule, ...]:
    """The tags of a publish that `buildkit tags` cannot name in full: the build-key tag, the sha- rule,
    the nightly's tags and --tag's."""
    sha = f" (here sha-{commit[:7]}-{variant_name})" if commit else ""
    return (
        TagRule(f"bk-<build key, first 24 hex>-{variant_name}", "immutable",
                "every build --push and push: the build key hashes every input (commit, patches, templates, base "
                "image digests, flags) and is known once the build context is rendered (`buildkit build --json` "
                "prints it); a publish that finds this tag in the registry builds nothing"),
        TagRule(f"sha-<commit, first 7 hex>-{variant_name}", "immutable",
                f"every release that is not a prerelease, and every local build{sha}"),
        TagRule(f"<next patch>-nightly.<YYYYMMDD>[.N]-{variant_name}", "immutable",
                "buildkit nightly, instead of the release tags: the next patch after the highest release of any "
                "variant, the UTC date, .N for a further nightly that day"),
        TagRule(f"nightly-{variant_name}", "moving",
                "buildkit nightly: its latest nightly; `buildkit promote` gives that digest a version's release tags"),
        TagRule("<TAG>", "moving", "build --push --tag TAG, as given"),
    )


Bump = Literal["patch", "minor", "major"]  # --bump: which part of the highest release a new version raises
BUMPS: tuple[Bump, ...] = get_args(Bump)


def highest_version(existing_tags: list[str], variant_name: str) -> str | None:
    """The highest release V (no prerelease) among the `V-<variant>` tags; None when there is none."""
    suffix = f"-{variant_name}"
    found = []
    for tag in existing_tags:
        if tag.endswith(suffix):
            try:
                v = semver.Version.parse(tag[: -len(suffix)])
            except ValueError:
                continue
            if not v.prerelease and not v.build:
                found.append(v)
    return str(max(found)) if found else None


def next_version(existing_tags: list[str], variant_name: str, bump: Bump = "patch") -> str:
    """Bump the highest release V of `V-<variant>` tags; 0.1.0 when there is none."""
    if bump not in BUMPS:
        raise ConfigError(f"--bump must be one of {', '.join(BUMPS)}, got {bump!r}")
    highest = highest_version(existing_tags, variant_name)
    if highest is None:
        return "0.1.0"
    v = semver.Version.parse(highest)
    return str({"patch": v.bump_patch, "minor": v.bump_minor, "major": v.bump_major}[bump]())
