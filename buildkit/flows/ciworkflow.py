"""`buildkit ci github`: the GitHub Actions workflow that runs the nightly.

Rendered from templates/ci/github-nightly.yml.j2 (a subfolder, so the image templates' hash,
render.templates_sha256, does not change with it). The workflow holds secret *references*
(`${{ secrets.NAME }}`) only, never values: the names are checked to be secret names, and no
value from the environment is read.

What the workflow does on a hosted runner, in order: check out the repository holding
buildkit.toml; install buildkit from its git repository (`pip install git+URL@REF`: the package
is not on PyPI; by default the URL and commit this buildkit was installed from, see
install_spec); free disk space (a CUDA devel image and its build need ~25 GB, a hosted runner
has ~14 GB free); restore the ccache of every variant (actions/cache) and put it into the
builder's cache mounts (`buildkit ccache import`); run `buildkit nightly` with the layer cache
in the GitHub Actions cache (`type=gha`, one scope per variant) and the workflow's --image and
--config; take the cache mounts out again (`buildkit ccache export`) for actions/cache to save.
An arm64-only build runs on an arm64 runner (a native compile); a list of platforms runs on amd64 and
cross-compiles the others.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jinja2

from buildkit import __version__
from buildkit.core.errors import ConfigError
from buildkit.core.paths import templates_dir

TEMPLATE = "ci/github-nightly.yml.j2"
DEFAULT_PATH = Path(".github/workflows/buildkit-nightly.yml")
DEFAULT_CRON = "17 3 * * *"
SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# (name, low, high, names) of the five cron fields, as GitHub's POSIX cron takes them
_CRON_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
                ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
                ("day of week", 0, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")))
ARM64_RUNNER = "ubuntu-24.04-arm"
AMD64_RUNNER = "ubuntu-latest"
CCACHE_DIR = ".buildkit-ccache"
_SAFE = re.compile(r"^[A-Za-z0-9_.:/@=<>~!+, -]+$")  # what may appear unquoted-ish in a run line or value


@dataclass(frozen=True)
class WorkflowOptions:
    registry: str  # host[:port] of image.name, for docker/login-action
    cron: str = DEFAULT_CRON
    username_secret: str = "REGISTRY_USERNAME"
    password_secret: str = "REGISTRY_PASSWORD"
    python_version: str = "3.11"
    install: str = ""  # what `pip install` gets: git+URL@REF (see install_spec)
    config: str = "buildkit.toml"  # path of buildkit.toml in the repository, as given
    image: str = ""  # --image given to `ci github`: passed on to the nightly
    summary_file: str = "buildkit-nightly.json"
    builder_driver: str = "docker-container"
    timeout_minutes: int = 360
    runner: str = AMD64_RUNNER  # runs-on (ARM64_RUNNER for linux/arm64)
    layer_cache: str = "gha"  # gha, registry (an image.name:buildcache-<variant> tag) or none
    cache_ref: str = ""  # with layer_cache registry: the repository that holds the cache tags
    ccache: bool = True  # carry each variant's ccache from run to run (actions/cache)
    free_disk: bool = True


def _cron_value(text: str, low: int, high: int, names: tuple[str, ...]) -> int | None:
    if text.isdigit():
        value = int(text)
        return value if low <= value <= high else None
    if text.upper() in names:
        return low + names.index(text.upper())
    return None


def _cron_field_problem(field: str, name: str, low: int, high: int, names: tuple[str, ...]) -> str | None:
    """Why one cron field is wrong, or None: *, N, A-B, with /STEP, comma lists; values in range."""
    for part in field.split(","):
        base, slash, step = part.partition("/")
        if slash and (not step.isdigit() or int(step) == 0):
            return f"the {name} step {step!r} is not a positive number"
        if base == "*":
            continue
        first, dash, last = base.partition("-")
        a = _cron_value(first, low, high, names)
        b = _cron_value(last, low, high, names) if dash else a
        if a is None or b is None:
            bad = first if a is None else last
            return f"the {name} {bad!r} is not in {low}-{high}"
        if a > b:
            return f"the {name} range {base!r} runs backwards"
    return None


def check_cron(cron: str) -> str:
    """A 5-field cron expression with every value in its field's range (61 minutes: refused)."""
    fields = cron.split()
    if len(fields) != 5:
        raise ConfigError(f"--cron {cron!r} is not a 5-field cron expression such as {DEFAULT_CRON!r} "
                          "(minute hour day-of-month month day-of-week, UTC)")
    for field, (name, low, high, names) in zip(fields, _CRON_FIELDS):
        problem = _cron_field_problem(field, name, low, high, names)
        if problem:
            raise ConfigError(f"--cron {cron!r}: {problem}")
    return " ".join(fields)


def install_spec(repo: str | None = None, ref: str | None = None,
                 read_direct_url: Callable[[], str | None] | None = None) -> str:
    """What the runner's `pip install` gets: git+REPO@REF when given; else the git URL and commit
    this buildkit was installed from (pip's direct_url.json, PEP 610); else ConfigError."""
    if repo:
        url = repo if repo.startswith("git+") else f"git+{repo}"
        return f"{url}@{ref or 'v' + __version__}"
    text = (read_direct_url or _direct_url)()
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        data = {}
    vcs = data.get("vcs_info") or {}
    if vcs.get("vcs") == "git" and data.get("url") and not str(data["url"]).startswith("file:"):
        return f"git+{data['url']}@{ref or vcs.get('commit_id') or vcs.get('requested_revision')}"
    raise ConfigError("this buildkit was not installed from a git URL, so the workflow cannot install the same "
                      "one; pass --buildkit-repo URL [--buildkit-ref TAG] (the package is not on PyPI)")


def _direct_url() -> str | None:
    from importlib import metadata

    try:
        return metadata.distribution("llama-buildkit").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None


def config_in_repo(config: Path, cwd: Path) -> str:
    """buildkit.toml's path as the workflow (run at the repository root) names it: relative to cwd."""
    rel = os.path.relpath(config.resolve(), cwd.resolve())
    if rel.startswith(".."):
        raise ConfigError(f"--config {config} is outside {cwd}; run `buildkit ci github` at the root of the "
                          "repository that holds it")
    return Path(rel).as_posix()


def runner_for(platform: str) -> str:
    return ARM64_RUNNER if platform.split("/")[1:2] == ["arm64"] else AMD64_RUNNER


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
                        ("--summary", options.summary_file), ("--driver", options.builder_driver),
                        ("--runner", options.runner)):
        _check(name, value)
    for name, value in (("--image", options.image), ("--cache-ref", options.cache_ref)):
        if value:
            _check(name, value)
    if options.layer_cache not in ("gha", "registry", "none"):
        raise ConfigError(f"--layer-cache {options.layer_cache!r} is not one of gha, registry, none")
    if options.layer_cache == "registry" and not options.cache_ref:
        raise ConfigError("--layer-cache registry needs the repository for the cache tags (image.name)")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(directory or templates_dir())),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)

    def secret(name: str) -> str:
        return "${{ secrets." + name + " }}"

    text = env.get_template(TEMPLATE).render(
        cron=check_cron(options.cron), registry=options.registry, python_version=options.python_version,
        install=options.install or install_spec(), config=options.config, summary_file=options.summary_file,
        image=options.image, runner=options.runner, layer_cache=options.layer_cache, cache_ref=options.cache_ref,
        ccache=options.ccache, free_disk=options.free_disk, ccache_dir=CCACHE_DIR,
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
