"""Tags with roles (pure): every tag of an artifact from one rule per role (issue 40).

API:
- ``Tag(name, role, immutable)``: one tag; ``role`` is one of ROLES.
- ``RoleTagSet.for_build(version, commit, variant, default_variant=..., build_key=None, extra=())`` -> the
  artifact's tags in publishing order; ``.immutable()`` and ``.moving()`` their names, ``.by_role(role)`` the
  tags of one role, ``.plain()`` the ``plan.tags.TagSet`` (immutable, moving) the publishing code takes today.
- ``TagTarget(commit, variant, default_variant, build_key, extra)``: what a publication is, as far as its tags
  go, made once where the publication is decided; ``TagTarget.of(cfg, ...)`` holds the one is-default rule.
- ``publication_tags(target, version)`` -> the TagSet of every publication (build --push, push, multi-platform,
  the nightly and its assemble, promote, `buildkit tags`): the one caller of release_tags.

``variant`` is the artifact's name as tags have it (plan.tags.artifact_variant: cpu, cpu-arm64, cuda13.1-sm120).
Adding a tag rule is one function of ``(ctx) -> tuple[Tag, ...]`` and its place in RULES. The names are
those of the scheme release_tags documents (below): it is made from RULES, the one place tag rules live.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import semver

from buildkit.plan.config import ResolvedConfig
from buildkit.plan.tags import TagSet, build_key_tag, check_tag, parse_version

Role = Literal["version", "sha", "build_key", "nightly", "variant", "latest", "extra"]
ROLES: tuple[Role, ...] = get_args(Role)


@dataclass(frozen=True)
class Tag:
    name: str
    role: Role
    immutable: bool  # an immutable tag never moves to another digest


@dataclass(frozen=True)
class _Ctx:
    version: semver.Version
    commit: str
    variant: str
    default_variant: bool
    build_key: str | None
    extra: tuple[str, ...]

    @property
    def release(self) -> bool:
        return not self.version.prerelease


def _version_of_variant(c: _Ctx) -> tuple[Tag, ...]:
    """V-<variant> always; <major>.<minor>-<variant>, <major>-<variant> (not while 0) for a release."""
    v = c.version
    out = [Tag(f"{v}-{c.variant}", "version", True)]
    if c.release:
        out.append(Tag(f"{v.major}.{v.minor}-{c.variant}", "version", False))
        if v.major > 0:
            out.append(Tag(f"{v.major}-{c.variant}", "version", False))
    return tuple(out)


def _sha(c: _Ctx) -> tuple[Tag, ...]:
    return (Tag(f"sha-{c.commit[:7]}-{c.variant}", "sha", True),) if c.release else ()


def _nightly(c: _Ctx) -> tuple[Tag, ...]:
    nightly = not c.release and str(c.version.prerelease).split(".")[0] == "nightly"
    return (Tag(f"nightly-{c.variant}", "nightly", False),) if nightly else ()


def _variant(c: _Ctx) -> tuple[Tag, ...]:
    return (Tag(c.variant, "variant", False),) if c.release else ()


def _version_of_default(c: _Ctx) -> tuple[Tag, ...]:
    """The default variant's bare V, <major>.<minor>, <major> (not while 0)."""
    v = c.version
    if not (c.release and c.default_variant):
        return ()
    out = [Tag(str(v), "version", True), Tag(f"{v.major}.{v.minor}", "version", False)]
    if v.major > 0:
        out.append(Tag(str(v.major), "version", False))
    return tuple(out)


def _latest(c: _Ctx) -> tuple[Tag, ...]:
    return (Tag("latest", "latest", False),) if c.release and c.default_variant else ()


def _build_key(c: _Ctx) -> tuple[Tag, ...]:
    return (Tag(build_key_tag(c.build_key, c.variant), "build_key", True),) if c.build_key else ()


def _extra(c: _Ctx) -> tuple[Tag, ...]:
    return tuple(Tag(name, "extra", False) for name in dict.fromkeys(c.extra))


# in publishing order (immutable() and moving() keep it)
RULES: tuple[Callable[[_Ctx], tuple[Tag, ...]], ...] = (
    _version_of_variant, _sha, _nightly, _variant, _version_of_default, _latest, _build_key, _extra)


@dataclass(frozen=True)
class RoleTagSet:
    tags: tuple[Tag, ...]

    @classmethod
    def for_build(cls, version: str, commit: str, variant: str, *, default_variant: bool,
                  build_key: str | None = None, extra: tuple[str, ...] = ()) -> RoleTagSet:
        ctx = _Ctx(parse_version(version), commit, variant, default_variant, build_key, extra)
        out: list[Tag] = []
        for rule in RULES:
            for tag in rule(ctx):
                if tag.name not in {t.name for t in out}:  # an extra tag the scheme already gives is not repeated
                    out.append(Tag(check_tag(tag.name), tag.role, tag.immutable))
        return cls(tuple(out))

    def immutable(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tags if t.immutable)

    def moving(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tags if not t.immutable)

    def by_role(self, role: str) -> tuple[Tag, ...]:
        if role not in ROLES:
            raise ValueError(f"unknown tag role {role!r}")
        return tuple(t for t in self.tags if t.role == role)

    def plain(self) -> TagSet:
        """The TagSet publishing takes: names by kind, each with its role."""
        return TagSet(immutable=self.immutable(), moving=self.moving(),
                      roles=tuple((t.name, t.role) for t in self.tags))


def release_tags(version: str, commit: str, variant_name: str, *, default_variant: bool,
                 build_key: str | None = None, extra: tuple[str, ...] = ()) -> TagSet:
    """The tag scheme (cf. docker/metadata-action's semver rules, per variant), from RULES:

    immutable: V-<variant>, sha-<7>-<variant> (and the build-key tag);
    moving: <major>.<minor>-<variant>, <major>-<variant> (not while major is 0), <variant>;
    the default variant also gets V, <major>.<minor>, <major> (not while 0) and latest.
    A prerelease gets only V-<variant> and, for nightlies, nightly-<variant>: never latest.
    extra: the tags --tag asked for, moving (a later build may take them), after the scheme's own.
    Every tag is checked against Docker's grammar (so a '+build' suffix is refused).
    """
    return RoleTagSet.for_build(version, commit, variant_name, default_variant=default_variant,
                                build_key=build_key, extra=extra).plain()


@dataclass(frozen=True)
class TagTarget:
    """What a publication is, as far as its tags go (all but the version, which a registry may decide:
    the next patch, or the one a found build was published as). Made once where the publication is decided."""
    commit: str
    variant: str  # the artifact's name as tags have it (plan.tags.artifact_variant; a nightly's key)
    default_variant: bool = False  # the config's image.default_variant: gets V, MAJOR.MINOR, MAJOR, latest
    build_key: str | None = None  # its bk- tag, last
    extra: tuple[str, ...] = ()  # --tag's, moving

    @classmethod
    def of(cls, cfg: ResolvedConfig, variant: str, commit: str, *, build_key: str | None = None,
           extra: tuple[str, ...] = ()) -> TagTarget:
        """The target of a variant of this config: the is-default rule (its name is image.default_variant)."""
        return DefaultVariantRule.of(cfg).target(variant, commit, build_key=build_key, extra=extra)


@dataclass(frozen=True)
class DefaultVariantRule:
    """The config's rule of which variant gets the plain tags (image.default_variant), read once (a unit's spec
    holds it: flows/unit/spec.py)."""
    default_variant: str

    @classmethod
    def of(cls, cfg: ResolvedConfig) -> DefaultVariantRule:
        return cls(cfg.image.default_variant)

    def target(self, variant: str, commit: str, *, build_key: str | None = None,
               extra: tuple[str, ...] = ()) -> TagTarget:
        """The target of a variant: the is-default rule."""
        return TagTarget(commit, variant, variant == self.default_variant, build_key, extra)


def publication_tags(target: TagTarget, version: str) -> TagSet:
    """The tags of a publication of target as version: every publishing path's, from RULES."""
    return release_tags(version, target.commit, target.variant, default_variant=target.default_variant,
                        build_key=target.build_key, extra=target.extra)
