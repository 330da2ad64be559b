"""The `buildkit` command line: the group, and the registration of the commands, one module each
(buildkit/cli/<command>.py). Every BuildkitError becomes one line on stderr and exit code 1
(cli/options.py: handle_errors, which each command wears).

A command's module is imported when the command runs (or its --help is shown), not before: `buildkit
--help` and a mistyped command import click and this module only (issue 50 item 8: 0.34 s became a
fraction of that). COMMANDS names each command's module and object, and the one line `buildkit --help`
shows for it; tests/unit/test_cli_lazy.py holds those lines to the commands' own help.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping

import click

from buildkit import __version__

# name: (module, object, the line `buildkit --help` shows; the command's own first help sentence)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "archs": ("buildkit.cli.archs", "archs",
              "List the architectures buildkit can build, with CMake string and minimum CUDA."),
    "bake": ("buildkit.cli.bake", "bake",
             "Build the matrix (matrix.archs x matrix.cuda_versions x matrix.targets) with..."),
    "base": ("buildkit.cli.base", "base", "Make base images here, for a machine that cannot pull them (no docker.io)."),
    "bench": ("buildkit.cli.bench", "bench",
              "Measure tokens/s of a llama-server: a running one (--url) or an image started..."),
    "build": ("buildkit.cli.build", "build",
              "Fetch the pinned commit, patch, render, build with buildx, verify and write..."),
    "ccache": ("buildkit.cli.ccache", "ccache",
               "Move the ccache of the matrix's variants out of the builder's cache mounts,..."),
    "ci": ("buildkit.cli.ci", "ci", "Generate CI configuration that runs buildkit."),
    "config": ("buildkit.cli.config", "config_cmd", "Print the resolved configuration and where each value came from."),
    "diff": ("buildkit.cli.diff", "diff",
             "Compare two images: A and B are OCI archives or layout folders, local engine..."),
    "doctor": ("buildkit.cli.doctor", "doctor",
               "Check this machine for the configured build: engine and image store, buildx..."),
    "gpu-check": ("buildkit.cli.gpucheck", "gpu_check",
                  "Run the fork's test-backend-ops from IMAGE's tests target (`test -b CUDA0`),..."),
    "init": ("buildkit.cli.init", "init",
             "Write a commented buildkit.toml with the fork's current head pinned, and a..."),
    "keys": ("buildkit.cli.signing", "keys", "Signing keys (cosign's key format: ECDSA P-256, PEM)."),
    "nightly": ("buildkit.cli.nightly", "nightly",
                "Build and push the matrix for the head of source.branch, unless every variant..."),
    "promote": ("buildkit.cli.promote", "promote",
                "Turn a nightly into a release: its digest gets the release tags of --release,..."),
    "push": ("buildkit.cli.push", "push",
             "Publish the image of the lock's entry for this variant (built before, still..."),
    "render": ("buildkit.cli.render", "render",
               "Fetch, patch and render the Dockerfile and build context without building."),
    "reproduce": ("buildkit.cli.reproduce", "reproduce",
                  "Rebuild TARGET (a buildkit.lock, or an image reference) from its recorded..."),
    "run": ("buildkit.cli.run", "run", "Run an image's llama-server with a runtime profile: prints or executes the..."),
    "tags": ("buildkit.cli.tags", "tags",
             "Print the tags a published build of a --release gets, immutable first, then..."),
    "workload-check": ("buildkit.cli.workloadcheck", "workload_check",
                       "Check the fork's own features from IMAGE with a runtime profile; print one..."),
    "verify-image": ("buildkit.cli.signing", "verify_image",
                     "Check REF's signature, that its signed provenance's subject is the digest the..."),
}


class LazyCommands(MutableMapping[str, click.Command]):
    """The group's commands: each imported from its module when first asked for by name."""

    def __init__(self) -> None:
        self.loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.loaded:
            if name not in COMMANDS:
                raise KeyError(name)
            module, attribute, _ = COMMANDS[name]
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{module}.{attribute} is not a click command")
            self.loaded[name] = command
        return self.loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self.loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self.loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*COMMANDS, *self.loaded]))

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self.loaded))


def short_help(text: str, limit: int) -> str:
    """The first sentence of text within limit characters, cut at a word with "...": what click makes of a
    command's help for its group's list (click 8.5 deprecated its own function, make_default_short_help)."""
    words = text.split()
    for i, word in enumerate(words):
        if word.endswith(".") and (i == len(words) - 1 or not words[i + 1][0].islower()):
            words = words[: i + 1]
            break
    line = " ".join(words)
    if len(line) <= limit:
        return line
    if limit < 3:
        return "..."
    import textwrap

    return textwrap.shorten(line, limit, placeholder="...", break_on_hyphens=False)


class LazyGroup(click.Group):
    """A group whose --help lists its commands from COMMANDS, without importing them."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, short_help(COMMANDS[n][2], limit) if n in COMMANDS
                 else self.commands[n].get_short_help_str(limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="buildkit")
def main() -> None:
    """Build a pinned commit of a llama.cpp fork into a tested container image for one CUDA arch.

    \b
    Typical use:
      buildkit init --fork URL --image REF  # a buildkit.toml here, the fork's head pinned
      buildkit archs                      # what can be built
      buildkit config                     # resolved settings and where each came from
      buildkit render --arch sm_120 --out ctx/
      buildkit build --arch sm_120        # fetch, patch, render, buildx, verify, lock

    Settings come from buildkit.toml, then LLAMA_BUILDKIT_* variables, then flags.
    """
    from buildkit.release.signkeys import withhold_key_env

    withhold_key_env()  # the signing key's PEM is read from here, and no child process inherits it


main.commands = LazyCommands()


if __name__ == "__main__":  # pragma: no cover
    main()
