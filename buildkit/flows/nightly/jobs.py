"""The nightly as CI runs it: one job per variant and platform (`buildkit nightly --plan|--job|--assemble`).

`buildkit nightly` alone builds the whole matrix on one machine. A hosted runner cannot (a CUDA
variant takes ~45 min and ~8 GB of disk), so the workflow of `buildkit ci github` splits it:

1. plan (`plan_nightly`): resolve the branch head and ask the registry what each variant's
   nightly tag was built from (nightly.previous_builds: one ls-remote, one request per variant);
   the units (variant, platform) that need a build (nightly.stale_variants: a new commit or patch
   set, or an input the config decides changed) become the GitHub matrix, each with the runner
   label that builds it natively and the reason. Nothing to build: the workflow ends here.
2. job (`run_job`): build, verify and push one unit at the planned commit and version, by digest
   under its build-key tag `bk-<key>-<variant>` only, and a CUDA unit's tests image (flows/unit/testsimage.py)
   under `bk-<key>-<variant>-tests`; its result (digest, build key, checks, the tests image's digest) is
   a small JSON file the workflow carries to the next job as an artifact.
3. assemble (`assemble`): from the jobs' digests, through the registry API only (nothing built,
   nothing pulled): one OCI index per multi-platform variant (oci/ociindex.index_document over
   the manifests the jobs pushed), then the nightly tags; the summary as JSON and Markdown.

The registry is the record here (the labels say what each image was built from); no lock is kept
on the runners.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
import json
import re
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from buildkit.core.savefile import write_or_keep
from buildkit.flows.unit.buildunit import BY_DIGEST, Publication, UnitOptions
from buildkit.flows.matrix.bake import build_matrix
from buildkit.flows.unit.pipeline import Prepared
from buildkit.flows.unit.cudacontexts import check_cuda_available
from buildkit.flows.unit.spec import build_options, cuda_settings, variant_spec, VariantSpec
from buildkit.flows.unit.testsimage import builds_tests, registry_tests_tag, tests_of_image
from buildkit.flows.unit.signpublished import write_predicates, index_sign_step
from buildkit.oci.ociindex import PlatformManifest, index_document
from buildkit.oci.ocilayout import sha256_digest
from buildkit.plan.buildkey import index_key
from buildkit.plan.patchqueue import patch_policy
from buildkit.core.boundedread import MiB, read_json_object
from buildkit.core.errors import BuildkitError, ConfigError, PatchError, TamperedError
from buildkit.core.platforms import ARCHES
from buildkit.flows.nightly.plan import (Excluded, JobResult, NightlyPlan, PlannedPrevious, PlannedUnit,
                                        PlannedVariant)
from buildkit.flows.nightly.run import (ls_remote_head, nightly_tags, nightly_version, normalise_url,
                                    repository_of, today)
from buildkit.flows.nightly.previous import nightly_tag, old_commit_of, one_per_key, previous_builds, stale_variants
from buildkit.flows.nightly.plan import VariantStatus
from buildkit.flows.nightly.summary import Summary, VariantResult
from buildkit.oci.registry import RegistryClient, client_for
from buildkit.plan.config import ResolvedConfig
from buildkit.plan.matrix import Variant, bake_target_name, matrix_variants
from buildkit.core.urlcreds import split_credentials
from buildkit.plan.tags import TagSet, build_key_tag, parse_version
from buildkit.release.lock import LockEntry
from buildkit.release.artifact import Published, Image, Index
from buildkit.release.publish import publish
from buildkit.release.ownership import image_signature_proof
from buildkit.release.signer import Signer, public_key_of

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

    from buildkit.engine.api import Engine, OutStream
    from buildkit.oci.imageref import ImageRef

PLAN_FILE = "plan.json"
RESULT_LIMIT = 16 * MiB  # the plan and a job's result: a few KB each
# GitHub-hosted runner labels and the CPU of their machines; self-hosted runners carry X64 / ARM64 (the catalogue's)
HOSTED_RUNNERS = {label: p.docker for p in ARCHES.values() for label in p.github_runners}
ARCH_LABELS = {p.github_arch: p.docker for p in ARCHES.values()}
DEFAULT_RUNNERS = tuple((p.docker, p.github_runners[0]) for p in ARCHES.values() if p.github_runners)
_SHA = re.compile(r"^[0-9a-f]{40}$")


def label_arch(labels: str) -> str | None:
    """The CPU a runs-on label set (comma separated) says its machine has, or None when it does not say."""
    for label in (part.strip().lower() for part in labels.split(",")):
        if label in HOSTED_RUNNERS or label in ARCH_LABELS:
            return HOSTED_RUNNERS.get(label) or ARCH_LABELS[label]
    return None


def build_arch(variant: Variant) -> str:
    """The CPU of the machine a unit compiles on: build.build_platform's when set (a cross build),
    else the image's own platform (a native compile on a runner of that CPU)."""
    return (variant.cfg.build.build_platform or variant.request.platform).split("/")[1]


def unit_id(variant: Variant) -> str:
    """A unit's name where GitHub allows letters, digits, '_' and '-' only (artifacts, cache keys)."""
    return bake_target_name(variant.unit)


def check_runners(variants: list[Variant], runners: dict[str, str]) -> None:
    """Every unit has a runner for the CPU it compiles on, and no label says another CPU."""
    for arch, labels in runners.items():
        said = label_arch(labels)
        if said is not None and said != arch:
            raise ConfigError(f"runner {labels!r} is a {said} machine; it cannot build the {arch} units natively "
                              f"(give a {arch} runner label)")
    for v in variants:
        if build_arch(v) not in runners:
            raise ConfigError(f"{v.unit} compiles on {build_arch(v)} and no runner is given for {build_arch(v)} "
                              f"(--runner {build_arch(v)}=LABEL)")


def parse_runners(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """ARCH=LABEL[,LABEL...] items -> {arch: labels}."""
    out = {}
    for item in items:
        arch, eq, labels = item.partition("=")
        if not eq or arch not in ARCHES or not labels:
            raise ConfigError(f"--runner {item!r} is not {' or '.join(f'{a}=LABELS' for a in ARCHES)}")
        out[arch] = labels
    return out


def _unit_entry(v: Variant, runners: dict[str, str], reason: str) -> PlannedUnit:
    labels = runners[build_arch(v)]
    return PlannedUnit(id=unit_id(v), unit=v.unit, variant=v.key, platform=v.request.platform, split=v.platform_split,
                       runner=tuple(labels.split(",")) if "," in labels else labels, reason=reason)


def plan_nightly(cfg: ResolvedConfig, *, runners: dict[str, str], date: str | None = None,
                 force: bool = False, signer: Signer | None = None) -> NightlyPlan:
    """What tonight's jobs are: the head, the version, and the units that need a build (the matrix). With a
    signer's key, a nightly image the lock does not record must be signed by it to be skipped
    (nightlyprevious.py)."""
    date = date or today()
    if not (len(date) == 8 and date.isdigit()):
        raise ConfigError(f"--date {date!r} is not YYYYMMDD")
    variants, excluded = matrix_variants(cfg)
    check_runners(variants, runners)
    for v in variants:  # a CUDA release the package index lacks stops the plan, before any job starts
        check_cuda_available(v.request, cuda_settings(v.cfg))
    repository = repository_of(cfg)
    url, branch = normalise_url(cfg.source.url), cfg.source.branch
    queue = patch_policy(cfg).load()
    head = ls_remote_head(url, branch, auth=split_credentials(cfg.source.url)[1])
    with client_for(repository.registry) as client:
        previous = previous_builds(client, repository, variants, cfg.lock.path, url, branch,
                                   public_key_of(signer))
        reasons = stale_variants(previous, variants, head, queue.sha256, url, force)
        todo = [v for v in variants if reasons[v.key]]
        version = nightly_version(client.list_tags(repository.repository), [v.key for v in variants], date) \
            if todo else ""
    return NightlyPlan(
        repository=repository.name, url=url, branch=branch, date=date, commit=head,
        old_commit=old_commit_of(previous), patch_set_sha256=queue.sha256, version=version, build=bool(todo),
        variants=tuple(PlannedVariant(variant=v.key, arch=v.request.arch.name, cuda_version=v.request.cuda_version,
                                      target=v.request.target, build=bool(reasons[v.key]), reason=reasons[v.key],
                                      previous=PlannedPrevious(**p.to_dict()) if (p := previous[v.key]) else None)
                       for v in one_per_key(variants)),
        units=tuple(_unit_entry(v, runners, reasons[v.key]) for v in todo),
        excluded=tuple(Excluded(c, r) for c, r in excluded))


def plan_summary(plan: NightlyPlan) -> Summary:
    """The summary of a night the plan ends (nothing to build), or the start of the assembled one."""
    summary = Summary(repository=plan.repository, url=plan.url, branch=plan.branch, date=plan.date,
                      old_commit=plan.old_commit, new_commit=plan.commit, up_to_date=not plan.build,
                      version=plan.version, excluded=[asdict(e) for e in plan.excluded])
    for entry in plan.variants:
        if not entry.build:
            p = entry.previous
            assert p is not None  # a variant not built has a nightly tag (stale_variants)
            summary.variants.append(_result(entry, VariantStatus.SKIPPED, previous_commit=p.commit, commit=p.commit,
                                            digest=p.digest, version=p.version or "",
                                            tags=[nightly_tag(entry.variant)], known_from=p.known_from))
    return summary


def _result(entry: PlannedVariant, status: VariantStatus, **fields: Any) -> VariantResult:
    return VariantResult(variant=entry.variant, arch=entry.arch, cuda_version=entry.cuda_version,
                         target=entry.target, status=status, reason=entry.reason, **fields)


def github_outputs(plan: NightlyPlan) -> dict[str, str]:
    """What the plan job hands the others (one line each: $GITHUB_OUTPUT's NAME=VALUE form)."""
    return {"build": "true" if plan.build else "false", "commit": plan.commit, "version": plan.version,
            "matrix": json.dumps(plan.to_dict()["matrix"], separators=(",", ":"))}


def write_github_outputs(outputs: dict[str, str], env: Mapping[str, str] | None = None) -> list[str]:
    """NAME=VALUE lines appended to $GITHUB_OUTPUT when set; a line for a file that could not be written."""
    import os

    path = (os.environ if env is None else env).get("GITHUB_OUTPUT")
    if not path:
        return []
    text = "".join(f"{name}={value}\n" for name, value in outputs.items())
    return [p for p in [write_or_keep(path, text, "the step outputs", append=True)] if p]


# ---------------------------------------------------------------- one job: one unit

def find_unit(cfg: ResolvedConfig, unit: str) -> Variant:
    variants = matrix_variants(cfg)[0]
    for v in variants:
        if unit in (v.unit, unit_id(v)):
            return v
    raise ConfigError(f"--job {unit!r} is not a unit of the matrix ({', '.join(unit_id(v) for v in variants)})")


def run_job(cfg: ResolvedConfig, unit: str, *, verify: bool = True, stream: OutStream | None = None,
            signer: Signer | None = None, attest_dir: Path | None = None, engine: Engine) -> JobResult:
    """Build, verify and push one unit (source.commit and image.version: the plan's) by digest under
    its build-key tag, signed by signer; attest_dir: the predicates of the pushed image for `cosign attest`
    (the keyless form). A failure is in the result (status failed), not raised, but for ConfigError."""
    return JobResult(**_run_job(cfg, unit, verify=verify, stream=stream, signer=signer, attest_dir=attest_dir,
                                engine=engine))


def _run_job(cfg: ResolvedConfig, unit: str, *, verify: bool, stream: OutStream | None, signer: Signer | None,
             attest_dir: Path | None = None, engine: Engine) -> dict[str, Any]:
    stream = sys.stderr if stream is None else stream
    commit, version = cfg.source.commit, cfg.image.version
    if not _SHA.fullmatch(commit or ""):
        raise ConfigError(f"--job needs --commit with the plan's full 40-hex commit, not {commit!r}")
    parse_version(version)
    v = find_unit(cfg, unit).with_values("nightly", source__commit=commit, image__version=version)
    repository = repository_of(cfg)
    out = {"id": unit_id(v), "unit": v.unit, "variant": v.key, "platform": v.request.platform, "commit": commit,
           "version": version, "status": VariantStatus.FAILED, "built": False, "digest": "", "build_key": "", "tag": "",
           "build_seconds": None, "checks": (), "error": "", "tests_tag": "", "tests_digest": ""}
    tests = builds_tests(v.request.arch, v.cfg.options.gpu_check.backend)

    # under its build-key tag, which may be replaced: the same inputs; its tests image under that tag's -tests
    def by_digest(_: VariantSpec, prepared: Prepared) -> UnitOptions:
        tags = TagSet((), ()).plus(build_key_tag(prepared.build_key, v.key), "build_key", immutable=True)
        return UnitOptions(tests=tests, publish=Publication(
            client, repository, tags, version, how=BY_DIGEST, force=True, signer=signer,
            tests_tag=registry_tests_tag(prepared.build_key, v.key) if tests else ""))

    with tempfile.TemporaryDirectory(prefix="buildkit-job-") as tmp:
        try:
            with client_for(repository.registry) as client:
                (b,), _ = build_matrix([variant_spec(v, engine)], build_options(cfg, engine), Path(tmp),
                                       engine=engine, verify=verify, stream=stream, stop_on=(PatchError,),
                                       finish=by_digest)
            out["built"] = b.outcome is not None and b.outcome.ok
            out["build_seconds"] = b.outcome.seconds if b.outcome else None
            out["checks"] = tuple(c.to_json() for c in b.report.checks) if b.report else ()
            if b.unit is not None and b.unit.failed != "verify":  # verified (pushed, or not: the error says)
                assert b.prepared is not None  # a unit ran: it was prepared
                out["build_key"] = b.prepared.build_key
                out["tag"] = build_key_tag(b.prepared.build_key, v.key)
                out["tests_tag"] = registry_tests_tag(b.prepared.build_key, v.key) if tests else ""
            if not b.ok or b.unit is None or b.unit.published is None:
                out["error"] = b.error
                return out
            out["digest"] = b.unit.published.digest
            out["tests_digest"] = b.unit.tests.digest if b.unit.tests is not None else ""
            if attest_dir is not None and b.unit.result is not None:
                done = b.unit
                entry = replace(LockEntry.of(done.prepared.plan, done.prepared.outcome(done.result, engine=engine)),
                                version=version)
                write_predicates(entry, b.unit.published.digest, repository.name, attest_dir)
            out["status"] = VariantStatus.PASSED
        except BuildkitError as exc:
            if isinstance(exc, ConfigError):
                raise
            out["error"] = str(exc)
    return out


# ---------------------------------------------------------------- assemble: indexes and tags, no build

def read_results(folder: Path) -> tuple[NightlyPlan, dict[str, JobResult]]:
    """(the plan, {unit id: job result}) from the folder the workflow downloaded its artifacts into."""
    def load(path: Path) -> dict[str, Any]:
        try:
            return read_json_object(path, RESULT_LIMIT)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--assemble: cannot read {path}: {exc}") from None

    if not (folder / PLAN_FILE).is_file():
        raise ConfigError(f"--assemble {folder}: no {PLAN_FILE} (the plan job's artifact) in it")
    plan = NightlyPlan.from_dict(load(folder / PLAN_FILE), f"--assemble: {folder / PLAN_FILE}")
    results = {}
    for path in sorted(folder.glob("*.json")):
        if path.name != PLAN_FILE:
            result = JobResult.from_dict(load(path), f"--assemble: {path}")
            results[result.id] = result
    return plan, results


def _no_result(unit: PlannedUnit, plan: NightlyPlan) -> JobResult:
    return JobResult(id=unit.id, unit=unit.unit, variant=unit.variant, platform=unit.platform, commit=plan.commit,
                     version=plan.version, status=VariantStatus.FAILED, built=False, digest="", build_key="", tag="",
                     build_seconds=None, checks=(), error="no result from its job", tests_tag="", tests_digest="")


def assemble(cfg: ResolvedConfig, folder: Path, *, signer: Signer | None = None) -> Summary:
    """The nightly tags (and, for a multi-platform variant, its index) on the digests the jobs pushed."""
    plan, results = read_results(folder)
    summary = plan_summary(plan)
    repository = repository_of(cfg)
    if repository.name != plan.repository:
        raise ConfigError(f"the plan is for {plan.repository}, this configuration for {repository.name}")
    done = {}
    with client_for(repository.registry) as client:
        for entry in plan.variants:
            if not entry.build:
                continue
            units = [u for u in plan.units if u.variant == entry.variant]
            got = [results.get(u.id) or _no_result(u, plan) for u in units]
            seconds = max((r.build_seconds or 0 for r in got), default=None)
            checks = [dict(c, platform=u.platform) for u, r in zip(units, got, strict=True) for c in r.checks]
            failed = [f"{u.unit}: {r.error or 'failed'}" for u, r in zip(units, got, strict=True)
                      if r.status != VariantStatus.PASSED]
            if failed:
                done[entry.variant] = _result(entry, VariantStatus.FAILED, previous_commit=_prev(entry),
                                                 error="; ".join(failed), build_seconds=seconds, checks=checks)
                continue
            try:
                published = _tag_variant(client, repository, plan, entry, units, got, signer)
            except BuildkitError as exc:
                done[entry.variant] = _result(entry, VariantStatus.FAILED, previous_commit=_prev(entry),
                                                 build_seconds=seconds, error=f"built, not published: {exc}",
                                                 checks=checks)
                continue
            tests = _tests_of(client, repository, got, published.digest)
            done[entry.variant] = _result(entry, VariantStatus.PASSED, previous_commit=_prev(entry), commit=plan.commit,
                                             digest=published.digest, version=plan.version,
                                             tags=list(published.tags), changed_tags=list(published.added),
                                             build_seconds=seconds, checks=checks,
                                             tests=tests if tests.startswith(f"{repository.name}@") else "",
                                             error="" if tests.startswith(f"{repository.name}@") else tests)
    skipped = {v.variant: v for v in summary.variants}
    summary.variants = [skipped.get(e.variant) or done[e.variant] for e in plan.variants]
    return summary


def _tests_of(client: RegistryClient, repository: ImageRef, got: list[JobResult], digest: str) -> str:
    """`repo@digest` of the tests image a single-platform unit's job pushed, checked in the registry to name the
    image at digest; "" when the job pushed none (or the variant has several platforms: each job's result names
    its own); else why it cannot be used (a line starting "no tests image: ")."""
    if len(got) != 1 or not got[0].tests_digest:
        return ""
    return tests_of_image(client, repository, got[0].tests_digest, digest)


def _prev(entry: PlannedVariant) -> str | None:
    return entry.previous.commit if entry.previous else None


def _tag_variant(client: RegistryClient, repository: ImageRef, plan: NightlyPlan, entry: PlannedVariant,
                 units: list[PlannedUnit], got: list[JobResult], signer: Signer | None = None) -> Published:
    """A single-platform unit's digest gets the nightly tags (its job signed it); several platforms get an
    index over their manifests first (under its own build-key tag, last), signed here."""
    repo = repository.repository
    public = public_key_of(signer)
    if public is not None:  # nothing is tagged or signed here that the jobs did not build and sign
        for u, r in zip(units, got, strict=True):
            _check_job_image(client, repo, public, plan, u, r)
    tags = nightly_tags(plan.version, plan.commit, entry.variant)
    if not any(u.split for u in units):
        return publish(client, repository, Image(got[0].digest, platform=units[0].platform), tags)
    manifests = []
    for u, r in zip(units, got, strict=True):
        body, media_type, _ = client.get_manifest(repo, r.digest)
        manifests.append(PlatformManifest.of_body(u.platform, r.digest, body, media_type))
    document = index_document(manifests)
    key = index_key((u.platform, r.build_key) for u, r in zip(units, got, strict=True))
    tags = tags.plus(build_key_tag(key, entry.variant), "build_key", immutable=True)
    index = Index(sha256_digest(document), document=document, platforms=tuple(u.platform for u in units))
    sign = index_sign_step(signer, commit=plan.commit, version=plan.version) if signer is not None else None
    return publish(client, repository, index, tags, sign=sign)  # (each job signed its own image)


def _check_job_image(client: RegistryClient, repo: str, key: ec.EllipticCurvePublicKey, plan: NightlyPlan,
                     unit: PlannedUnit, result: JobResult) -> None:
    """That the digest a job's result names is signed by key with a provenance of the plan's commit and version
    and the job's build key (release/ownership.py), else the one line saying it is not ours."""
    expected = {"commit": plan.commit, "version": plan.version, "build_key": result.build_key}
    try:
        image_signature_proof(client, repo, result.digest, key, expected)
    except BuildkitError as exc:
        raise TamperedError(f"{unit.unit}'s job result names {result.digest}, which this project did not publish "
                            f"({exc}): tampered? nothing was tagged or signed") from None
