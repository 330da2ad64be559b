"""`buildkit nightly`: follow the fork's branch, rebuild only what moved, publish nightlies.

1. Resolve the head of `source.branch` with `git ls-remote` (no mirror, no clone).
2. For every variant of the matrix (see plan/matrix.py), find what it was last built from
   (flows/nightly/previous.py). The registry is the truth, the lock a shortcut: one HEAD request for
   `nightly-<variant>` gives the digest the world sees; if the lock's `nightly` record holds that
   same digest, its commit and patch-set hash, and the inputs of the lock's entry of that digest,
   are used (nothing more to ask). Otherwise (a fresh CI runner without the lock, a lock from
   another machine, an image tagged by hand) the image's labels are read from the registry: its
   commit, patch set and recorded inputs. Up to date: built from the head commit with the current
   patch queue, and every input the variant's config decides (plan/configinputs.py: build.cpu_level,
   build.cmake_args, image.title, ..., this buildkit's version and templates) as the config makes it
   now; an input the image predates counts as its declared `absent` value. Anything else is built,
   and the summary says why ("new commit ...", "config changed: cpu_level all -> native",
   "buildkit 0.2.0 -> 0.3.0", "template changed"). An unchanged night costs one ls-remote and one
   registry request per variant (and the /v2/ probe), and never runs buildx.
3. Otherwise the variants that are not up to date are built for the head commit (the patch
   queue applied; one that does not apply fails the night naming the patch, before anything is
   built or pushed), with `docker buildx bake`, verified, and each pushed on its own with the
   version `<next patch>-nightly.<YYYYMMDD>` (`.<n>` appended for a second nightly on the same
   day: immutable tags never move) and the moving tag `nightly-<variant>`; a CUDA variant's tests
   image (flows/unit/testsimage.py) after it, under `bk-<key>-<variant>-tests` only. A variant that fails
   anywhere keeps its previous images and tags and does not stop the others.
4. The lock gets each published variant's entry, and its `nightly` record (commit, patch set,
   digest, version per variant) is updated.
5. A summary (JSON, and Markdown for $GITHUB_STEP_SUMMARY): old and new commit, the changelog
   (`git log old..new`), each variant's result, digest, tags, build time and whether it was skipped.
CI splits steps 1-3 into jobs (flows/nightly/jobs.py); `promote` makes a nightly a release.
"""

from __future__ import annotations

import datetime as _dt
import re
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import semver

from buildkit.flows.unit.buildunit import LOADED, Publication, UnitOptions
from buildkit.flows.matrix.bake import assemble_indexes, build_matrix, index_platforms, IndexBuild
from buildkit.flows.unit.pipeline import Prepared
from buildkit.flows.unit.spec import VariantSpec
from buildkit.flows.unit.testsimage import builds_tests, registry_tests_tag
from buildkit.flows.matrix.multiplatform import record_index
from buildkit.flows.unit.signpublished import index_sign_step
from buildkit.flows.nightly.spec import NightlySpec, at_head, on_engine, with_build
# the nightly's API, re-exported explicitly (`X as X`: strict mypy's no_implicit_reexport)
from buildkit.flows.nightly.plan import VariantStatus as VariantStatus
from buildkit.flows.nightly.summary import (Summary as Summary, VariantResult as VariantResult,
                                           write_summaries as write_summaries)
from buildkit.flows.nightly.previous import (Previous as Previous, is_current as is_current,
                                            nightly_tag as nightly_tag, old_commit_of as old_commit_of,
                                            one_per_key as one_per_key, previous_builds as previous_builds,
                                            read_nightly_record as read_nightly_record,
                                            stale_variants as stale_variants,
                                            update_nightly_record as update_nightly_record)
from buildkit.release.artifact import Index
from buildkit.release.publish import publish
from buildkit.source.changelog import Changelog, Commit as Commit, changelog
from buildkit.core.errors import BuildkitError, ConfigError, PatchError, SourceError
from buildkit.oci.imageref import ImageRef
from buildkit.source.gitcmd import Git
from buildkit.oci.registry import RegistryClient, client_for
from buildkit.release.signer import Signer, public_key_of
from buildkit.plan.tags import TagSet, next_version, parse_version
from buildkit.plan.tagset import TagTarget, publication_tags
from buildkit.core.urlcreds import UrlAuth, redact_text, split_credentials

if TYPE_CHECKING:
    from buildkit.engine.api import Engine, OutStream

# The no-op path (ls-remote, lock, one HEAD per variant) imports only what it needs: the build
# path's modules (pipeline, publish, bake's runner, the source stage) are imported where they are
# used, which keeps `buildkit nightly` close to its floor when nothing moved. (GitPython itself is
# imported by ls-remote: every git command goes through gitcmd.py, with its deadline and limits.)

_SCP_LIKE = re.compile(r"[^/]+:")  # top-level key of buildkit.lock


# ---------------------------------------------------------------- the branch head

def _ls_remote(url: str, args: tuple[str, ...], about: str, timeout: float, auth: UrlAuth | None) -> str:
    """`git ls-remote ARGS -- URL REFS` through gitcmd.py; a failure is one SourceError line."""
    import git

    try:
        return Git(auth=auth, timeout=timeout).run("ls-remote", *args, what=f"ls-remote of {url}")
    except git.GitCommandError as err:
        lines = [ln.strip() for ln in getattr(err, "raw_stderr", "").splitlines() if ln.strip()]
        lines = [ln.removeprefix("fatal: ") for ln in lines
                 if not ln.lower().startswith(("please make sure", "and the repository"))]
        lines = [ln for ln in lines if ln]
        said = redact_text(lines[-1]) if lines else "no output"
        raise SourceError(f"cannot ask {url} for {about} ({said}); check source.url and the network") from None


def ls_remote_head(url: str, branch: str, timeout: float = 120, auth: UrlAuth | None = None) -> str:
    """The commit refs/heads/<branch> points at, asked of the server; nothing is cloned or fetched.
    Credentials in url reach git through the environment only (gitcmd.py)."""
    if not branch or branch.startswith("-"):
        raise ConfigError(f"source.branch {branch!r} is not a branch name")
    url, given = split_credentials(url)
    ref = f"refs/heads/{branch}"
    out = _ls_remote(url, ("--", url, ref), f"its branch {branch}", timeout, auth or given)
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return sha.strip().lower()
    raise SourceError(f"{url} has no branch {branch!r} (source.branch)")


def ls_remote_default(url: str, timeout: float = 120, auth: UrlAuth | None = None) -> tuple[str | None, str]:
    """(the branch HEAD names, or None where the server does not say; the commit of HEAD), in one ls-remote."""
    url, given = split_credentials(url)
    out = _ls_remote(url, ("--symref", "--", url, "HEAD"), "its HEAD", timeout, auth or given)
    branch, commit = None, None
    for line in out.splitlines():
        left, _, name = line.partition("\t")
        if name != "HEAD":
            continue
        if left.startswith("ref: refs/heads/"):
            branch = left.removeprefix("ref: refs/heads/").strip()
        elif re.fullmatch(r"[0-9a-fA-F]{40}", left.strip()):
            commit = left.strip().lower()
    if commit is None:
        raise SourceError(f"{url} has no HEAD commit (an empty repository?); push a branch first")
    return branch, commit


def nightly_version(existing_tags: list[str], keys: list[str], date: str) -> str:
    """<next patch>-nightly.<date>: the next patch release of the highest of every variant's releases,
    with .2, .3, ... added when a nightly of that version and day exists already for some variant."""
    base = max((semver.Version.parse(next_version(existing_tags, key, "patch")) for key in keys),
               default=semver.Version.parse("0.1.0"))
    stem = f"{base}-nightly.{date}"
    tags = set(existing_tags)
    candidate, n = stem, 1
    while any(f"{candidate}-{key}" in tags for key in keys):
        n += 1
        candidate = f"{stem}.{n}"
    parse_version(candidate)
    return candidate


def nightly_tags(version: str, commit: str, key: str) -> TagSet:
    """A nightly is a prerelease: never the default variant's tags, whatever the config's default."""
    return publication_tags(TagTarget(commit, key), version)


# ---------------------------------------------------------------- the run

def normalise_url(url: str) -> str:
    """source.normalise_url's rule (tested to agree), without importing GitPython."""
    url = split_credentials(url)[0]
    if "://" in url or _SCP_LIKE.match(url):
        return url
    return str(Path(url).expanduser().resolve())


def today() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y%m%d")


def _result_for(variant: VariantSpec, status: VariantStatus, **fields: Any) -> VariantResult:
    req = variant.request
    return VariantResult(variant=variant.key, arch=req.arch.name, cuda_version=req.cuda_version, target=req.target,
                         status=status, **fields)


def run_nightly(spec: NightlySpec, *, date: str | None = None, force: bool = False, verify: bool = True,
                stream: OutStream | None = None, signer: Signer | None = None, engine: Engine) -> Summary:
    """One nightly run; failures of the night are in the summary (Summary.ok), not raised."""
    start = time.monotonic()
    stream = sys.stderr if stream is None else stream
    date = date or today()
    if not (len(date) == 8 and date.isdigit()):
        raise ConfigError(f"--date {date!r} is not YYYYMMDD")
    variants, repository, url, lock_path = list(spec.variants), spec.repository, spec.url, spec.lock_path
    summary = Summary(repository=repository.name, url=url, branch=spec.branch, date=date, old_commit=None,
                      new_commit=None, excluded=[{"combination": c, "reason": r} for c, r in spec.excluded])
    queue = spec.patches.load()
    reasons: dict[str, str] = {}  # why each variant is built tonight
    try:
        head = ls_remote_head(url, spec.branch, auth=spec.auth)
        summary.new_commit = head
        with client_for(repository.registry) as client:
            previous = previous_builds(client, repository, variants, lock_path, url, spec.branch,
                                       public_key_of(signer))
            summary.check_seconds = time.monotonic() - start
            summary.old_commit = old_commit_of(previous)
            reasons = stale_variants(previous, variants, head, queue.sha256, url, force)
            todo = [v for v in variants if reasons[v.key]]
            if not todo:
                summary.up_to_date = True
                current = {k: p for k, p in previous.items() if p is not None}  # all of them (is_current)
                summary.variants = [_result_for(v, VariantStatus.SKIPPED, previous_commit=current[v.key].commit,
                                                commit=current[v.key].commit, digest=current[v.key].digest,
                                                version=current[v.key].version or "", tags=[nightly_tag(v.key)],
                                                known_from=current[v.key].known_from) for v in one_per_key(variants)]
                summary.changelog = Changelog(head, head, ())
                return summary
            existing = client.list_tags(repository.repository)
            summary.version = nightly_version(existing, [v.key for v in variants], date)
            _build_and_publish(spec, client, repository, summary, variants, todo, previous, head, queue.sha256,
                               lock_path, verify=verify, stream=stream, signer=signer, engine=engine)
    except BuildkitError as exc:
        if isinstance(exc, ConfigError):
            raise
        summary.error = str(exc)
        done = {v.variant for v in summary.variants}
        summary.variants += [_result_for(v, VariantStatus.FAILED,
                                         error="not built: the night failed before this variant")
                             for v in one_per_key(variants) if v.key not in done]
    finally:
        for result in summary.variants:
            result.reason = "" if result.skipped else reasons.get(result.variant, "")
        summary.seconds = time.monotonic() - start
    return summary


def _build_and_publish(spec: NightlySpec, client: RegistryClient, repository: ImageRef, summary: Summary,
                       variants: list[VariantSpec], todo: list[VariantSpec], previous: dict[str, Previous | None],
                       head: str, patch_set: str, lock_path: Path, *, verify: bool, stream: OutStream,
                       signer: Signer | None = None, engine: Engine) -> None:
    todo_keys = {v.key for v in todo}
    results: dict[str, VariantResult] = {}
    for v in variants:
        if v.key not in todo_keys:
            p = previous[v.key]
            assert p is not None  # not built tonight: its previous build is current (stale_variants)
            results[v.key] = _result_for(v, VariantStatus.SKIPPED, previous_commit=p.commit, commit=p.commit,
                                         digest=p.digest, version=p.version or "", tags=[nightly_tag(v.key)],
                                         known_from=p.known_from)
    build = on_engine(spec.build, engine)
    to_build = [with_build(at_head(v, head, summary.version), build) for v in todo]

    def publication(v: VariantSpec, prepared: Prepared) -> UnitOptions:  # a platform of several: with its index, below
        if v.platform_split:
            return UnitOptions()
        tests = builds_tests(v.request.arch, v.gpu_check_backend)  # under bk-<key>-<variant>-tests
        return UnitOptions(lock_path=lock_path, lock_first=False, tests=tests, publish=Publication(
            client, repository, nightly_tags(summary.version, head, v.key), summary.version, how=LOADED,
            signer=signer, tests_tag=registry_tests_tag(prepared.build_key, v.key) if tests else ""))

    with tempfile.TemporaryDirectory(prefix="buildkit-nightly-") as tmp:
        try:
            builds, _ = build_matrix(to_build, build, Path(tmp), engine=engine, verify=verify,
                                     stream=stream, stop_on=(PatchError,), finish=publication)
        except PatchError as exc:
            summary.error = f"the patch queue does not apply to {head[:12]}, nothing was built or pushed: {exc}"
            summary.version = ""  # nothing was published under it
            summary.changelog = changelog(spec.cache_root, summary.url, summary.old_commit, head)
            for v in to_build:
                p = previous[v.key]
                results[v.key] = _result_for(v, VariantStatus.FAILED, previous_commit=p.commit if p else None,
                                             error=f"not built: {exc}")
            summary.variants = [results[v.key] for v in one_per_key(variants)]
            return
        summary.changelog = changelog(spec.cache_root, summary.url, summary.old_commit, head)
        for index in assemble_indexes(builds, Path(tmp), engine):
            results[index.key] = _publish_index(client, repository, summary, index, previous[index.key], head,
                                                patch_set, lock_path, signer, engine)
        for b in builds:
            if b.variant.platform_split:  # published with its index, above
                continue
            w, p = b.variant, previous[b.variant.key]
            seconds = b.outcome.seconds if b.outcome else None
            checks = [c.to_json() for c in b.report.checks] if b.report else []
            published, error = (b.unit.published, b.error) if b.unit is not None else (None, b.error)
            if b.unit is not None and b.unit.failed in ("lock", "publish"):  # built and verified
                error = f"built, not published: {b.error}"
            elif published is not None:
                try:
                    update_nightly_record(lock_path, summary.url, summary.branch, w.key, {
                        "commit": head, "patch_set_sha256": patch_set, "digest": published.digest,
                        "version": summary.version, "date": summary.date})
                except BuildkitError as exc:
                    error = f"built, not published: {exc}"
            if error or published is None:
                results[w.key] = _result_for(w, VariantStatus.FAILED, previous_commit=p.commit if p else None,
                                             error=error, build_seconds=seconds, checks=checks)
                continue
            tags, digest, added = nightly_tags(summary.version, head, w.key), published.digest, published.added
            results[w.key] = _result_for(w, VariantStatus.PASSED, previous_commit=p.commit if p else None, commit=head,
                                         digest=digest, version=summary.version, tags=list(tags.all),
                                         changed_tags=list(added), build_seconds=seconds, checks=checks,
                                         tests=b.unit.tests.reference if b.unit and b.unit.tests else "")
    summary.variants = [results[v.key] for v in one_per_key(variants)]


def _publish_index(client: RegistryClient, repository: ImageRef, summary: Summary, index: IndexBuild,
                   p: Previous | None, head: str, patch_set: str,
                   lock_path: Path, signer: Signer | None, engine: Engine) -> VariantResult:
    """A baked multi-platform variant: its index (each platform's manifest by digest, then the index)
    under the nightly tags; the lock gets the index and each platform's entry."""
    v = index.units[0].variant
    seconds = max((u.outcome.seconds for u in index.units if u.outcome), default=None)
    checks = [dict(c.to_json(), platform=u.variant.request.platform) for u in index.units if u.report
              for c in u.report.checks]
    previous_commit = p.commit if p else None
    if not index.ok:
        return _result_for(v, VariantStatus.FAILED, previous_commit=previous_commit, error=index.error,
                           build_seconds=seconds, checks=checks)
    tags = nightly_tags(summary.version, head, v.key)
    try:
        done = publish(client, repository, Index(index.digest, archive=index.archive,
                                                 platforms=tuple(u.variant.request.platform for u in index.units)),
                       tags, sign=None if signer is None else index_sign_step(
                           signer, commit=head, version=summary.version,
                           entries=[replace(b.entry(engine), version=summary.version)
                                    for b in index_platforms(index)]))
        digest, added, pushed = done.digest, done.added, done.pushed
        record_index(lock_path, index_platforms(index), v.request.target, v.request.image_name, digest,
                     index.build_key, index.tags, summary.version, pushed, engine=engine)
        update_nightly_record(lock_path, summary.url, summary.branch, v.key, {
            "commit": head, "patch_set_sha256": patch_set, "digest": digest, "version": summary.version,
            "date": summary.date})
    except BuildkitError as exc:
        return _result_for(v, VariantStatus.FAILED, previous_commit=previous_commit,
                           error=f"built, not published: {exc}", build_seconds=seconds, checks=checks)
    return _result_for(v, VariantStatus.PASSED, previous_commit=previous_commit, commit=head, digest=digest,
                       version=summary.version, tags=list(tags.all), changed_tags=list(added),
                       build_seconds=seconds, checks=checks)
