"""The summary of a nightly run: per variant, its result; as JSON and as Markdown ($GITHUB_STEP_SUMMARY); and the
tests images the gate job pulls by digest (gate_tests)."""

from __future__ import annotations

from typing import Any
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from buildkit.core.savefile import write_or_keep
from buildkit.flows.nightly.plan import KnownFrom, VariantStatus
from buildkit.flows.unit.testsimage import CPU_BACKEND, tests_of_release
from buildkit.oci.imageref import ImageRef
from buildkit.oci.registry import client_for
from buildkit.source.changelog import Changelog


@dataclass
class VariantResult:
    variant: str
    arch: str
    cuda_version: str | None
    target: str
    status: VariantStatus
    previous_commit: str | None = None
    commit: str | None = None  # what the image now in nightly-<variant> was built from
    digest: str = ""
    version: str = ""
    tags: list[str] = field(default_factory=list)
    changed_tags: list[str] = field(default_factory=list)
    build_seconds: float | None = None
    error: str = ""
    checks: list[dict[str, Any]] = field(default_factory=list)
    known_from: KnownFrom | None = None  # where the previous build's commit was read: "lock" or "registry"
    reason: str = ""  # why it was built tonight: "new commit ...", "config changed: cpu_level all -> native", ...
    tests: str = ""  # its tests image (flows/unit/testsimage.py), repository@digest, when one was pushed for it

    @property
    def skipped(self) -> bool:
        return self.status == VariantStatus.SKIPPED

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "skipped": self.skipped}


@dataclass
class Summary:
    repository: str
    url: str
    branch: str
    date: str
    old_commit: str | None
    new_commit: str | None
    up_to_date: bool = False
    version: str = ""
    changelog: Changelog | None = None
    variants: list[VariantResult] = field(default_factory=list)
    excluded: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    check_seconds: float = 0.0  # resolving the head and asking the registry
    seconds: float = 0.0  # the whole run
    bench_gate: str = ""  # `--assemble --bench-gate`: the line saying whether a bench gate runs (bench_gate_line)

    @property
    def ok(self) -> bool:
        return not self.error and all(v.status != VariantStatus.FAILED for v in self.variants)

    def to_dict(self) -> dict[str, Any]:
        return {
            "repository": self.repository, "url": self.url, "branch": self.branch, "date": self.date,
            "ok": self.ok, "up_to_date": self.up_to_date, "old_commit": self.old_commit,
            "new_commit": self.new_commit, "version": self.version, "error": self.error,
            "changelog": self.changelog.to_dict() if self.changelog else None,
            "variants": [v.to_dict() for v in self.variants], "excluded": self.excluded,
            "check_seconds": round(self.check_seconds, 3), "seconds": round(self.seconds, 3),
            "bench_gate": self.bench_gate or None,
        }

    def headline(self) -> str:
        if self.error:
            return f"nightly failed: {self.error}"
        if self.up_to_date:
            return (f"up to date: {self.branch} is still at {_short(self.new_commit)} and every variant was built "
                    f"from it as configured; nothing built ({self.check_seconds:.2f} s)")
        failed = [v.variant for v in self.variants if v.status == VariantStatus.FAILED]
        built = [v.variant for v in self.variants if v.status == VariantStatus.PASSED]
        if failed:
            return (f"nightly {self.version}: {len(failed)} of {len(built) + len(failed)} variants failed "
                    f"({', '.join(failed)})")
        return f"nightly {self.version}: {len(built)} variants built and pushed from {_short(self.new_commit)}"

    def to_markdown(self) -> str:
        icon = "✅" if self.ok else "❌"
        out = [f"## {icon} buildkit nightly of `{self.repository}`", "", self.headline(), "",
               f"- branch: `{self.branch}` of {self.url}",
               f"- old commit: `{self.old_commit or 'none'}`",
               f"- new commit: `{self.new_commit or 'unknown'}`"]
        if self.version:
            out.append(f"- version: `{self.version}`")
        if self.bench_gate:
            out.append(f"- {_md(self.bench_gate)}")
        if self.changelog is not None and self.old_commit != self.new_commit:
            out += ["", f"### Changelog ({len(self.changelog.commits)} commits)", ""]
            out += [f"- `{c.sha[:12]}` {_md(c.subject)}" for c in self.changelog.commits]
            if self.changelog.note:
                out.append(f"- _{_md(self.changelog.note)}_")
        out += ["", "### Variants", "", "| variant | result | digest | tags | build time | skipped |",
                "| --- | --- | --- | --- | --- | --- |"]
        for v in self.variants:
            result = v.status + (f" ({_md(v.reason)})" if v.reason else "") \
                + (f": {_short_error(v.error)}" if v.error else "")
            digest = f"`{v.digest[:19]}`" if v.digest else ""
            tags = " ".join(f"`{t}`" for t in v.tags)
            took = f"{v.build_seconds:.0f} s" if v.build_seconds is not None else ""
            out.append(f"| `{v.variant}` | {result} | {digest} | {tags} | {took} | {'yes' if v.skipped else 'no'} |")
        for ex in self.excluded:
            out.append(f"| {_md(ex['combination'])} | not in the matrix: {_md(ex['reason'])} | | | | |")
        return "\n".join(out) + "\n"


NO_GATE = "bench gate: none (no GPU runner configured; nightlies are not promoted automatically)"


def bench_gate_line(gate: str, summary: Summary) -> str:
    """The summary's line for `--bench-gate VARIANT|none` (the workflow passes none without --bench-runner):
    whether the bench job runs on the GPU runner tonight, and if not, why."""
    if gate == "none":
        return NO_GATE
    result = next((v for v in summary.variants if v.variant == gate), None)
    if result is None or result.status == VariantStatus.SKIPPED:
        return f"bench gate: {gate} was not built tonight; nothing benched or promoted"
    if not summary.ok:
        return f"bench gate: {gate} not benched: the nightly has failed variants; nothing promoted"
    return f"bench gate: {gate} benched on the GPU runner (see the bench job)"


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "unknown"


def _short_error(text: str, limit: int = 300) -> str:
    text = _md(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _md(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def write_summaries(summary: Summary, summary_path: str | None, env: Mapping[str, str] | None = None) -> list[str]:
    """JSON to summary_path (`nightly --summary`; --json prints it, the caller does that), Markdown appended
    to $GITHUB_STEP_SUMMARY. Returns a line for each that could not be written, saying where it was kept."""
    env = os.environ if env is None else env
    problems = []
    if summary_path:
        path = Path(summary_path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # write_or_keep says why the file cannot be written
        problems.append(write_or_keep(path, json.dumps(summary.to_dict(), indent=2) + "\n", "the JSON summary"))
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        problems.append(write_or_keep(step_summary, summary.to_markdown(), "the step summary", append=True))
    return [p for p in problems if p]


def gate_tests(repository: ImageRef, results: Sequence[VariantResult], gate: str) -> tuple[dict[str, str], list[str]]:
    """What the nightly's gate job pulls by digest (`nightly --assemble --bench-gate VARIANT`): the outputs
    `tests`, tonight's tests image of the variant (as its job pushed it, checked by assemble), and `release_tests`,
    the release's (tests_of_release); each "" when there is none, and a line saying what each is."""
    built = next((v for v in results if v.variant == gate and v.status == VariantStatus.PASSED and not v.skipped), None)
    if built is None:  # not built tonight: the gate does not run
        return {"tests": "", "release_tests": ""}, []
    with client_for(repository.registry) as client:
        release = tests_of_release(client, repository, gate)
    nightly = built.tests or built.error or ("no tests image: its job built none (a CUDA variant's does, a cpu "
                                             f"variant's only with gpu_check.backend {CPU_BACKEND})")
    outputs = {"tests": built.tests, "release_tests": "" if release.startswith("no tests image") else release}
    return outputs, [f"gate: nightly-{gate}: {nightly}", f"gate: release {gate}: {release}"]
