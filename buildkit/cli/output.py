"""What several commands print the same way: a publish result (build --push, push, promote)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from buildkit.release.promote import Promotion
    from buildkit.release.publish import PublishResult


def published_json(published: PublishResult | Promotion) -> dict[str, Any]:
    """A PublishResult (or a promotion) for --json."""
    data = asdict(published)
    data["tags"], data["added"] = list(published.tags), list(published.added)
    return data


def echo_published(published: PublishResult | Promotion, headline: str, as_json: bool) -> None:
    """The result as JSON, or the headline, then the tags it has and the ones this run added."""
    if as_json:
        click.echo(json.dumps(published_json(published), indent=2))
        return
    click.echo(headline)
    click.echo(f"tags: {' '.join(published.tags)}")
    click.echo(f"changed: {' '.join(published.added) or 'nothing'}")
    signed: tuple[str, ...] = getattr(published, "signed", ())
    if signed:  # a promotion moves tags only: the digest's signatures stay valid
        click.echo(f"signed: {' '.join(signed)}")
