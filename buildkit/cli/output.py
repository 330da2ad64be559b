"""What several commands print the same way: every JSON document (--json, a --summary or --json FILE), and a
publish result (build --push, push, promote)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import click

if TYPE_CHECKING:
    from buildkit.release.promote import Promotion
    from buildkit.release.publish import PublishResult

# what json.dumps writes (read-only views: a list[dict[str, str]] is one)
JsonValue: TypeAlias = "None | bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue]"


@runtime_checkable
class ToJson(Protocol):
    """A result that knows its JSON document (ImageDiff, IndexReproduceResult, MultiResult...)."""

    def to_json(self) -> Any: ...


def json_text(document: ToJson | JsonValue) -> str:
    """The one JSON rendering of a command's document: indented by two, keys in the order the document has
    them, no trailing newline (a file adds its own)."""
    return json.dumps(document.to_json() if isinstance(document, ToJson) else document, indent=2)


def emit_json(document: ToJson | JsonValue) -> None:
    """A command's document on stdout."""
    click.echo(json_text(document))


def published_json(published: PublishResult | Promotion) -> dict[str, Any]:
    """A PublishResult (or a promotion) for --json."""
    data = asdict(published)
    data["tags"], data["added"] = list(published.tags), list(published.added)
    return data


def echo_published(published: PublishResult | Promotion, headline: str, as_json: bool) -> None:
    """The result as JSON, or the headline, then the tags it has and the ones this run added."""
    if as_json:
        emit_json(published_json(published))
        return
    click.echo(headline)
    click.echo(f"tags: {' '.join(published.tags)}")
    click.echo(f"changed: {' '.join(published.added) or 'nothing'}")
    signed: tuple[str, ...] = getattr(published, "signed", ())
    if signed:  # a promotion moves tags only: the digest's signatures stay valid
        click.echo(f"signed: {' '.join(signed)}")
