"""`buildkit ci github`: the GitHub Actions workflow that runs the nightly.

Rendered from templates/ci/github-nightly.yml.j2 (a subfolder, so the image templates' hash,
render.templates_sha256, does not change with it). The workflow holds secret *references*
(`${{ secrets.NAME }}`) only, never values: the names are checked to be secret names, and no
value from the environment is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from . import __version__
from .errors import ConfigError
from .paths import templates_dir

TEMPLATE = "ci/github-nightly.yml.j2"
DEFAULT_PATH = Path(".github/workflows/buildkit-nightly.yml")
DEFAULT_CRON = "17 3 * * *"
SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CRON_FIELD = re.compile(r"^[0-9*/,-]+$")
_SAFE = re.compile(r"^[A-Za-z0-9_.:/@=<>~!+, -]+$")  # what may appear unquoted-ish in a run line or value


@dataclass(frozen=True)
class WorkflowOptions:
    registry: str  # host[:port] of image.name, for docker/login-action
    cron: str = DEFAULT_CRON
    username_secret: str = "REGISTRY_USERNAME"
    password_secret: str = "REGISTRY_PASSWORD"
    python_version: str = "3.11"
    install: str = f"llama-buildkit=={__version__}"  # what `pip install` gets
    config: str = "buildkit.toml"
    summary_file: str = "buildkit-nightly.json"
    builder_driver: str = "docker-container"
    timeout_minutes: int = 360


def check_cron(cron: str) -> str:
    fields = cron.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise ConfigError(f"--cron {cron!r} is not a 5-field cron expression such as {DEFAULT_CRON!r}")
    return " ".join(fields)


def _check(name: str, value: str) -> str:
    if not value or not _SAFE.match(value) or "${{" in value:
        raise ConfigError(f"{name} {value!r} contains characters a workflow line cannot carry safely")
    return value


def render_workflow(options: WorkflowOptions, directory: Path | None = None) -> str:
    for secret in (options.username_secret, options.password_secret):
        if not SECRET_NAME.match(secret) or secret.upper().startswith("GITHUB_") and secret != "GITHUB_TOKEN":
            raise ConfigError(f"{secret!r} is not a usable GitHub secret name (letters, digits, '_'; "
                              "not starting with GITHUB_ except GITHUB_TOKEN)")
    for name, value in (("registry", options.registry), ("--python", options.python_version),
                        ("--install", options.install), ("--config", options.config),
                        ("--summary", options.summary_file), ("--driver", options.builder_driver)):
        _check(name, value)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(directory or templates_dir())),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)

    def secret(name: str) -> str:
        return "${{ secrets." + name + " }}"

    text = env.get_template(TEMPLATE).render(
        cron=check_cron(options.cron), registry=options.registry, python_version=options.python_version,
        install=options.install, config=options.config, summary_file=options.summary_file,
        builder_driver=options.builder_driver, timeout_minutes=int(options.timeout_minutes),
        username=("${{ github.actor }}" if options.username_secret == "GITHUB_TOKEN"
                  else secret(options.username_secret)),
        password=secret(options.password_secret), tool_version=__version__,
        ghcr=options.registry == "ghcr.io")
    return text


def write_workflow(path: Path, text: str, *, force: bool = False) -> str:
    """Write the workflow; "written", "unchanged", or ConfigError when a different file is there."""
    if path.exists():
        if path.read_text() == text:
            return "unchanged"
        if not force:
            raise ConfigError(f"{path} exists and differs; pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return "written"
