"""`buildkit ci github`: the GitHub Actions workflow that runs the nightly.

Rendered from templates/ci/github-nightly.yml.j2 (a subfolder, so the image templates' hash,
render.templates_sha256, does not change with it). The workflow holds secret *references*
(`${{ secrets.NAME }}`) only, never values: the names are checked to be secret names, and no
value from the environment is read.

The workflow (see flows/nightly/jobs.py for the three steps of buildkit it runs):

* plan, on a hosted runner, in seconds: `buildkit nightly --plan` resolves the head, asks the
  registry, and gives the matrix of units (variant x platform) to build; with none, the run ends.
* build, one job per unit (`strategy.matrix` from the plan's output, fail-fast off), each on a
  runner of the CPU it compiles on (--runner ARCH=LABELS): install buildkit from its git
  repository (`pip install git+URL@COMMIT`: not on PyPI; by default the URL and commit of the running
  buildkit, flows/nightly/installorigin.py), free disk space, restore the unit's ccache
  (actions/cache, key unit + commit, falling back to the unit's last entry) into the builder,
  `buildkit nightly --job UNIT` (build, verify, push by digest under the build-key tag), and only
  when it built: save the ccache and delete the entry it replaces (one entry per unit).
* assemble: `buildkit nightly --assemble` puts the nightly tags (and indexes) on the jobs'
  digests through the registry API, and writes the summary (JSON artifact, step summary), with a
  line saying whether a bench gate runs (`--bench-gate VARIANT`, or `none` without --bench-runner).
* bench (with --bench-runner only), on a self-hosted GPU runner: the gate's checks, one step each, in
  order (a failing one ends the job): with --gpu-check, `buildkit gpu-check` of the nightly's tests image
  against the release's (both by digest, from assemble's outputs), then `buildkit bench --image NEW
  --compare-image OLD --max-slowdown PCT` (step id `gate`), whose gate table goes to the step summary and
  the report artifact; `buildkit promote` only when every check passed; the report uploaded and one
  line per check in the step summary whatever happened; a last step (if: failure()) says the nightly
  was not promoted (it stays a nightly, and the run is red).

The GitHub cache holds 10 GB per repository: `cache_budget` adds up what the matrix puts there
and a layer cache in it (type=gha, mode=min) that would not fit is refused; the default keeps the
layer cache in the registry (`<image>:buildcache-<unit>`, mode=max), outside that budget.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jinja2
import yaml

from buildkit import __version__
from buildkit.core.errors import ConfigError
from buildkit.core.paths import templates_dir
from buildkit.core.platforms import default_platform
from buildkit.core.boundedread import MiB, read_regular
from buildkit.core.wholefile import write_whole
from buildkit.flows.nightly.installorigin import install_spec
from buildkit.flows.nightly.jobs import DEFAULT_RUNNERS
from buildkit.flows.unit.spec import VariantSpec

TEMPLATE = "ci/github-nightly.yml.j2"
DEFAULT_PATH = Path(".github/workflows/buildkit-nightly.yml")
DEFAULT_CRON = "17 3 * * *"
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # matched whole (fullmatch)
# (name, low, high, names) of the five cron fields, as GitHub's POSIX cron takes them
_CRON_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
                ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
                ("day of week", 0, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")))
# the plan and assemble jobs build nothing: the default platform's first GitHub-hosted runner
AMD64_RUNNER = default_platform().github_runners[0]
CCACHE_DIR = ".buildkit-ccache"
RESULTS_DIR = ".buildkit-nightly"  # the plan and the jobs' results, carried between jobs as artifacts
GITHUB_CACHE_GB = 10.0
# What one unit puts in the GitHub cache, estimated (README: the arithmetic): its ccache (one
# entry per unit: the replaced one is deleted), and with --layer-cache gha its runtime stage's layers
CCACHE_GB = {"cuda": 0.3, "cpu": 0.1}
GHA_LAYERS_GB = {"cuda": 0.8, "cpu": 0.1}
# what a value may hold, matched whole (fullmatch: `$` would match before a trailing newline): it goes
# into a run: line between double quotes as well as into YAML (where the yaml filter serializes it)
_SAFE = re.compile(r"[A-Za-z0-9_.:/@=<>~!+, -]+")
_WORD = re.compile(r"[A-Za-z0-9_.-]+")  # a value a run line carries unquoted (the bench variant)


# sigstore's installer, pinned by commit (a tag can move): v3.8.1, which installs cosign v2.4.3 and checks it
COSIGN_INSTALLER = "sigstore/cosign-installer@d7d6bc7722e3daa8354c50bcb52f4837da5e9b6a"
SIGN_FORMS = ("key", "keyless")


# where BuildKit's layer cache is kept between runs (--layer-cache)
LayerCache = Literal["registry", "gha", "none"]

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
    runners: tuple[tuple[str, str], ...] = DEFAULT_RUNNERS  # (CPU, runs-on labels) of the build jobs
    plan_runner: str = AMD64_RUNNER  # runs-on of the plan and assemble jobs
    layer_cache: LayerCache = "registry"  # registry (image.name:buildcache-<unit> tags), gha (mode=min) or none
    cache_ref: str = ""  # with layer_cache registry: the repository that holds the cache tags
    ccache: bool = True  # carry each variant's ccache from run to run (actions/cache)
    free_disk: bool = True
    # the bench gate (a job on a GPU runner; off without bench_runner): the new nightly of bench_variant
    # against its current release, promoted only when not more than max_slowdown percent slower
    bench_runner: str = ""  # runs-on labels, comma separated
    bench_image: str = ""  # the repository (image.name) whose nightly and release tags are benched
    bench_variant: str = ""
    bench_model: str = ""  # the model's path on that runner
    bench_profile: str = ""
    max_slowdown: float = 5.0
    bench_runs: int = 0  # bench --runs (0: bench's default, 3)
    bench_max_tokens: int = 0  # bench --max-tokens (0: bench's default, 800)
    gpu_check: bool = False  # with bench_runner: gpu-check the nightly's tests image against the release's first
    # with bench_runner, after gpu-check: workload-check the nightly with bench_profile (lossless, then acceptance
    # against the release's within acceptance_tolerance); bench_model_draft is the drafter's path on the runner
    workload_check: bool = False
    bench_model_draft: str = ""
    acceptance_tolerance: float = 0.02
    # signing: "key" (the PEM in the LLAMA_BUILDKIT_SIGN_KEY secret; unset, nothing is signed) or "keyless"
    # (cosign with the job's OIDC identity, id-token: write; buildkit writes the predicates it attests)
    sign: str = "key"


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
    for field, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        problem = _cron_field_problem(field, name, low, high, names)
        if problem:
            raise ConfigError(f"--cron {cron!r}: {problem}")
    return " ".join(fields)


def config_in_repo(config: Path, cwd: Path) -> str:
    """buildkit.toml's path as the workflow (run at the repository root) names it: relative to cwd."""
    rel = os.path.relpath(config.resolve(), cwd.resolve())
    if rel.startswith(".."):
        raise ConfigError(f"--config {config} is outside {cwd}; run `buildkit ci github` at the root of the "
                          "repository that holds it")
    return Path(rel).as_posix()


def cache_budget(variants: Sequence[VariantSpec], layer_cache: LayerCache, *, ccache: bool = True) -> tuple[float, str]:
    """(GB the matrix's units put in the GitHub cache, the sum written out); ConfigError over 10 GB."""
    kinds = ["cuda" if v.request.arch.is_cuda else "cpu" for v in variants]
    per = {k: (CCACHE_GB[k] if ccache else 0.0) + (GHA_LAYERS_GB[k] if layer_cache == "gha" else 0.0)
           for k in CCACHE_GB}
    parts = [f"{kinds.count(k)} {k} unit(s) x {per[k]:.1f} GB" for k in per if k in kinds]
    total = sum(per[k] for k in kinds)
    text = f"{' + '.join(parts)} = {total:.1f} GB of the GitHub cache's {GITHUB_CACHE_GB:.0f} GB"
    if total > GITHUB_CACHE_GB:
        raise ConfigError(f"--layer-cache {layer_cache}: {text}; GitHub would evict entries every night "
                          "(use --layer-cache registry, the default, or none)")
    return total, text


def check_registry_login(registry: str, username_secret: str, password_secret: str) -> None:
    """GITHUB_TOKEN logs in to ghcr.io only."""
    if "GITHUB_TOKEN" in (username_secret, password_secret) and registry != "ghcr.io":
        raise ConfigError(f"GITHUB_TOKEN is a credential for ghcr.io only, not for {registry}; give "
                          "--username-secret and --password-secret naming secrets for that registry")


def _check(name: str, value: str) -> str:
    if not value or not _SAFE.fullmatch(value) or "${{" in value:
        raise ConfigError(f"{name} {value!r} contains characters a workflow line cannot carry safely")
    return value


def render_workflow(options: WorkflowOptions, directory: Path | None = None) -> str:
    if options.sign not in SIGN_FORMS:
        raise ConfigError(f"--sign {options.sign!r} is not one of {', '.join(SIGN_FORMS)}")
    for secret in (options.username_secret, options.password_secret):
        if not SECRET_NAME.fullmatch(secret) or secret.upper().startswith("GITHUB_") and secret != "GITHUB_TOKEN":
            raise ConfigError(f"{secret!r} is not a usable GitHub secret name (letters, digits, '_'; "
                              "not starting with GITHUB_ except GITHUB_TOKEN)")
    for name, value in (("registry", options.registry), ("--python", options.python_version),
                        ("--install", options.install), ("--config", options.config),
                        ("--summary", options.summary_file), ("--driver", options.builder_driver),
                        ("--plan-runner", options.plan_runner),
                        *(("--runner", f"{arch}={label}") for arch, label in options.runners)):
        _check(name, value)
    for name, value in (("--image", options.image), ("--cache-ref", options.cache_ref),
                        ("--bench-runner", options.bench_runner), ("--bench-variant", options.bench_variant),
                        ("--bench-image", options.bench_image),
                        ("--bench-model", options.bench_model), ("--bench-profile", options.bench_profile),
                        ("--bench-model-draft", options.bench_model_draft)):
        if value:
            _check(name, value)
    if options.bench_variant and not _WORD.fullmatch(options.bench_variant):  # unquoted in a run line
        raise ConfigError(f"--bench-variant {options.bench_variant!r} is not a variant name (letters, digits, "
                          "'.', '_', '-')")
    if options.layer_cache not in ("gha", "registry", "none"):
        raise ConfigError(f"--layer-cache {options.layer_cache!r} is not one of gha, registry, none")
    if options.layer_cache == "registry" and not options.cache_ref:
        raise ConfigError("--layer-cache registry needs the repository for the cache tags (image.name)")
    check_registry_login(options.registry, options.username_secret, options.password_secret)
    if options.bench_runner and not (options.bench_model and options.bench_variant and options.bench_image):
        raise ConfigError("--bench-runner needs --bench-model (the model's path on that runner)")
    for name, count in (("--bench-runs", options.bench_runs), ("--bench-max-tokens", options.bench_max_tokens)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigError(f"{name} {count!r} is not a positive whole number")
    if options.workload_check and not (options.bench_runner and options.bench_profile and options.bench_model_draft):
        raise ConfigError("--workload-check needs --bench-runner, --bench-profile and --bench-model-draft")
    if not 0 <= options.acceptance_tolerance <= 1:
        raise ConfigError(f"--acceptance-tolerance {options.acceptance_tolerance:g} is not a fraction (0-1)")
    if not 0 <= options.max_slowdown <= 100:
        raise ConfigError(f"--max-slowdown {options.max_slowdown:g} is not a percentage (0-100)")
    bench_labels = [label.strip() for label in options.bench_runner.split(",")] if options.bench_runner else []
    if any(not label for label in bench_labels):
        raise ConfigError(f"--bench-runner {options.bench_runner!r} has an empty label")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(directory or templates_dir())),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["yaml"] = yaml_value
    install = options.install or install_spec()[0]

    def secret_ref(name: str) -> str:
        return "${{ secrets." + name + " }}"

    text = env.get_template(TEMPLATE).render(
        cron=check_cron(options.cron), registry=options.registry, python_version=options.python_version,
        install=install, config=options.config, summary_file=options.summary_file,
        image=options.image, runners=options.runners, plan_runner=options.plan_runner, results_dir=RESULTS_DIR,
        layer_cache=options.layer_cache, cache_ref=options.cache_ref, bench_runner=options.bench_runner,
        bench_new=f"{options.bench_image}:nightly-{options.bench_variant}",
        bench_old=f"{options.bench_image}:{options.bench_variant}", bench_variant=options.bench_variant,
        bench_model=options.bench_model, bench_profile=options.bench_profile, max_slowdown=f"{options.max_slowdown:g}",
        bench_runs=options.bench_runs, bench_max_tokens=options.bench_max_tokens, gpu_check=options.gpu_check,
        workload_check=options.workload_check, bench_model_draft=options.bench_model_draft,
        acceptance_tolerance=f"{options.acceptance_tolerance:g}",
        ccache=options.ccache, free_disk=options.free_disk, ccache_dir=CCACHE_DIR,
        builder_driver=options.builder_driver, timeout_minutes=int(options.timeout_minutes),
        username=("${{ github.actor }}" if options.username_secret == "GITHUB_TOKEN"
                  else secret_ref(options.username_secret)),
        password=secret_ref(options.password_secret), tool_version=__version__,
        ghcr=options.registry == "ghcr.io", bench_labels=bench_labels, keyless=options.sign == "keyless",
        cosign_installer=COSIGN_INSTALLER)
    check_read_back(text, options, install, bench_labels)
    return text


def yaml_value(value: str | list[str]) -> str:
    """A value as YAML (the template's `yaml` filter): a double-quoted scalar, or a flow sequence of them,
    made by PyYAML's serializer, so `x: y`, `~`, `!!binary x`, `>` or `#` stay the text they are."""
    text: str = yaml.safe_dump(value, default_style='"', default_flow_style=True, width=float("inf"),
                               allow_unicode=True)
    return text.rstrip("\n")


def check_read_back(text: str, options: WorkflowOptions, install: str, bench_labels: list[str]) -> None:
    """The rendered workflow, read back with a YAML parser, says what was meant: the runners' labels,
    the registry, the schedule, the install line and the config path; else ConfigError."""
    try:
        doc = yaml.safe_load(text)
        jobs = doc["jobs"]
        on = doc.get("on", doc.get(True))  # YAML 1.1 reads the key `on` as true
        seen: list[tuple[str, object, object]] = [
            ("--plan-runner", jobs["plan"]["runs-on"], options.plan_runner),
            ("--plan-runner", jobs["assemble"]["runs-on"], options.plan_runner),
            ("--cron", on["schedule"][0]["cron"], check_cron(options.cron))]
        if bench_labels:
            seen.append(("--bench-runner", jobs["bench"]["runs-on"], bench_labels))
        for job in jobs.values():
            for step in job["steps"]:
                if str(step.get("uses", "")).startswith("docker/login-action@"):
                    seen.append(("registry", step["with"]["registry"], options.registry))
                if str(step.get("name", "")).startswith("Install buildkit"):
                    seen.append(("--install", step["run"], f'python -m pip install "{install}"'))
                if str(step.get("run", "")).startswith("buildkit nightly "):
                    seen.append(("--config", f'--config "{options.config}"' in step["run"], True))
    except (yaml.YAMLError, LookupError, TypeError, AttributeError) as exc:
        raise ConfigError(f"the generated workflow does not read back as YAML ({type(exc).__name__}): "
                          "a value holds what the template cannot carry") from None
    for name, got, meant in seen:
        if got != meant:
            raise ConfigError(f"the generated workflow does not read back {name} as given: {got!r}, not {meant!r}")


def write_workflow(path: Path, text: str, *, force: bool = False) -> str:
    """Write the workflow; "written", "unchanged", or ConfigError when a different file is there."""
    try:
        if path.exists():
            if read_regular(path, 16 * MiB) == text.encode():  # a FIFO there: one line, not a wait
                return "unchanged"
            if not force:
                raise ConfigError(f"{path} exists and differs; pass --force to overwrite it")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, text)  # a full disk leaves the workflow that was there
    except OSError as exc:
        raise ConfigError(f"cannot write the workflow {path}: {exc.strerror or exc}") from None
    return "written"
