"""The `diff` command: compare two images (registered in cli/main.py).

Exit codes: 0 identical; 2 the digests differ (the report says where); 1 an error (one `error:` line).
"""

from __future__ import annotations

import sys
from contextlib import ExitStack

import click

from buildkit.cli.options import handle_errors
from buildkit.cli.output import json_text
from buildkit.core.platforms import DEFAULT_PLATFORM

DIFFERENT = 2  # exit code of diff and reproduce when the digests differ


@click.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--platform", default=DEFAULT_PLATFORM, show_default=True, help="Platform to pick from an index.")
@click.option("--no-files", is_flag=True, help="Compare manifests, configs and layer digests only.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@handle_errors
def diff(a: str, b: str, platform: str, no_files: bool, as_json: bool) -> None:
    """Compare two images: A and B are OCI archives or layout folders, local engine images or
    registry references (force one with an oci:, docker: or registry: prefix).

    Exit 0 when the manifest digests are the same, 2 when they differ (with the config fields,
    layers and files that differ: path, size, sha256, and the ELF sections of differing binaries).
    """
    from buildkit.oci.imagediff import diff_images
    from buildkit.engine.current import get_engine
    from buildkit.oci.imagesource import open_image

    engine = get_engine()
    with ExitStack() as stack:
        image_a = open_image(a, stack, platform=platform, engine=engine)
        image_b = open_image(b, stack, platform=platform, engine=engine)
        result = diff_images(image_a, image_b, files=not no_files)
    click.echo(json_text(result) if as_json else result.report())
    if not result.same:
        sys.exit(DIFFERENT)
