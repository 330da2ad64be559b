"""What several commands print the same way: a publish result (build --push, push, promote)."""

from __future__ import annotations

import json
from dataclasses import asdict

import click


def published_json(published) -> dict:
    """A PublishResult (or a promotion) for --json."""
    data = asdict(published)
    data["tags"], data["added"] = list(published.tags), list(published.added)
    return data


def echo_published(published, headline: str, as_json: bool) -> None:
    """The result as JSON, or the headline, then the tags it has and the ones this run added."""
    if as_json:
        click.echo(json.dumps(published_json(published), indent=2))
        return
    click.echo(headline)
    click.echo(f"tags: {' '.join(published.tags)}")
    click.echo(f"changed: {' '.join(published.added) or 'nothing'}")
    if getattr(published, "signed", ()):  # a promotion moves tags only: the digest's signatures stay valid
        click.echo(f"signed: {' '.join(published.signed)}")
