"""`buildkit promote`: a nightly becomes a release without building.

The release tags of the version are put on the nightly's digest through the registry API; the
nightly's commit comes from its revision label, and no immutable tag that exists elsewhere moves.
"""

from __future__ import annotations

from dataclasses import dataclass

from buildkit.core.errors import ConfigError, RegistryError
from buildkit.oci.imageref import tag_of
from buildkit.oci.registry import client_for
from buildkit.release.artifact import Image
from buildkit.release.publish import VERSION_LABEL, image_labels, publish, publish_repository
from buildkit.plan.tags import parse_version
from buildkit.plan.tagset import DefaultVariantRule, publication_tags

REVISION_LABEL = "org.opencontainers.image.revision"


@dataclass(frozen=True)
class Promotion:
    repository: str
    source_tag: str
    digest: str
    version: str
    commit: str
    nightly_version: str
    tags: tuple[str, ...]
    added: tuple[str, ...]


def promote(image_name: str, rule: DefaultVariantRule, source_tag: str, version: str) -> Promotion:
    """Give the image of nightly-<variant> in image_name's repository the release tags of version (rule: which
    variant gets the plain tags): same digest, nothing built."""
    tag = (tag_of(source_tag) or "") if "/" in source_tag else source_tag  # a reference: its tag
    if not tag.startswith("nightly-") or tag == "nightly-":
        raise ConfigError(f"{source_tag!r} is not a nightly tag; promote takes nightly-<variant>, "
                          "e.g. nightly-cuda13.1-sm120")
    key = tag[len("nightly-"):]
    parsed = parse_version(version)
    if parsed.prerelease and str(parsed.prerelease).startswith("nightly"):
        raise ConfigError(f"--release {version} is a nightly version; promote to a release (X.Y.Z or X.Y.Z-rc.N)")
    repository = publish_repository(image_name)
    repo = repository.repository
    with client_for(repository.registry) as client:
        info = client.head_manifest(repo, tag)
        if info is None:
            raise RegistryError(f"{repository.name}:{tag} does not exist; run buildkit nightly first")
        labels = image_labels(client, repo, info.digest)
        commit = labels.get(REVISION_LABEL, "")
        if len(commit) != 40:
            raise RegistryError(f"{repository.name}:{tag} has no {REVISION_LABEL} label; not a buildkit image")
        tags = publication_tags(rule.target(key, commit), version)
        # the nightly's signatures sign this digest, not a tag: they stay valid under the release tags
        added = publish(client, repository, Image(info.digest), tags).added
    return Promotion(repository=repository.name, source_tag=tag, digest=info.digest, version=version,
                     commit=commit, nightly_version=labels.get(VERSION_LABEL, ""), tags=tags.all,
                     added=tuple(added))


def promotion_markdown(done: Promotion) -> str:
    """What `promote --step-summary` appends: the nightly promoted, its digest, the tags it got."""
    tags = " ".join(f"`{t}`" for t in done.tags)
    added = " ".join(f"`{t}`" for t in done.added) or "none (it had them all)"
    return "\n".join([
        f"## ✅ promoted `{done.repository}:{done.source_tag}` to {done.version}", "",
        "| nightly | version label | commit | digest | release tags | tags moved or added |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| `{done.source_tag}` | `{done.nightly_version or 'none'}` | `{done.commit[:12]}` | `{done.digest}` "
        f"| {tags} | {added} |", "", ""])
