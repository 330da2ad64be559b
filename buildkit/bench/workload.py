"""The fork's own features, checked on a running llama-server (issue 46): speculative decoding is lossless, its
drafts are accepted and faster, and a KV-cache type agrees with f16's choices. Stdlib only (with greedy.py and
client.py): scripts/gpu_run.py runs these on a GPU host without Docker, `buildkit workload-check` through the
engine.

Servers come from a `Servers` (the engine's containers, a bundle's or a native build's llama-server): each check
asks for one with the target alone (no draft model loaded at all) or with the drafter, with the llama-server
arguments of the profile, and gets its URL for as long as the with-block lasts.

* lossless: the target alone's greedy tokens for each prompt (on one server, once plain and once with its top
  two candidates, which must agree), against the speculative path's, each prompt on a fresh server and all of
  them again in sequence on one server (a speculative path must carry nothing from one request to the next);
  lossless.compare judges each.
* acceptance: the bench protocol (runs x max_tokens) with the drafter and with the target alone; acceptance.py.
* kv: top-1 agreement of a KV-cache type with the reference: the reference's greedy tokens fed back one
  position at a time (teacher-forced) to a server with the other KV type, its next token compared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from buildkit.bench.acceptance import Acceptance, measure
from buildkit.bench.client import run_bench
from buildkit.bench.greedy import Completion, complete
from buildkit.bench.kvagreement import KvAgreement, check_kv
from buildkit.bench.lossless import NEAR_TIE, Comparison, LosslessVerdict, compare
from buildkit.bench.protocol import Protocol as BenchProtocol
from buildkit.bench.servers import Servers
from buildkit.core.errors import BenchError

T = TypeVar("T")

# fixed prompts: plain text of the models' own vocabulary (printable ASCII), of different lengths
PROMPTS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "Write a short story about a robot who learns to paint, in three paragraphs.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Speculative decoding must not change the output of greedy sampling: the drafter proposes, the target "
    "verifies, and every token that reaches the user is one the target itself would have chosen.",
)


@dataclass(frozen=True)
class Setup:
    """One configuration to check: the profile's arguments with and without the drafter."""

    label: str  # e.g. "medium f16"
    spec_args: tuple[str, ...]  # with the drafter (e.g. --spec-type dflash --ctx-size-draft 256 ...)
    base_args: tuple[str, ...]  # the target alone (the same, less the draft-only arguments)


@dataclass(frozen=True)
class WorkloadReport:
    lossless: tuple[LosslessVerdict, ...] = ()
    acceptance: tuple[Acceptance, ...] = ()
    kv: tuple[KvAgreement, ...] = ()
    errors: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        return ([v.line() for v in self.lossless] + [a.line() for a in self.acceptance]
                + [k.line() for k in self.kv] + [f"error: {e}" for e in self.errors])

    def to_dict(self) -> dict[str, Any]:
        return {"lossless": [v.to_dict() for v in self.lossless], "acceptance": [a.to_dict() for a in self.acceptance],
                "kv": [k.to_dict() for k in self.kv], "errors": list(self.errors)}


# llama-server's options that only mean something with a draft model: the fork's (and older upstream's) names and
# upstream's --spec-draft-* ones (0.3.36's tree renamed --draft-max to --spec-draft-n-max); every other
# --spec-draft-* option takes a value too
DRAFT_FLAGS = frozenset({"--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft", "--spec-draft-backend-sampling",
                         "--no-spec-draft-backend-sampling"})
DRAFT_OPTIONS = frozenset({
    "--spec-type", "--ctx-size-draft", "-cd", "--n-gpu-layers-draft", "-ngld", "--gpu-layers-draft", "--draft-max",
    "--draft", "--draft-n", "--draft-min", "--draft-n-min", "--draft-p-min", "--draft-p-split", "--device-draft",
    "-devd", "--cache-type-k-draft", "-ctkd", "--cache-type-v-draft", "-ctvd", "--threads-draft", "-td",
    "--threads-batch-draft", "-tbd", "--spec-replace", "-otd", "--override-tensor-draft", "-ncmoed",
    "--n-cpu-moe-draft"})


def draft_only(args: Sequence[str]) -> tuple[str, ...]:
    """args without the options that only mean something with a draft model (the target alone's arguments)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in DRAFT_FLAGS:
            continue
        if name in DRAFT_OPTIONS or name.startswith("--spec-draft-"):
            skip = "=" not in arg
            continue
        out.append(arg)
    return tuple(out)


def _greedy_all(url: str, prompts: Sequence[str], n: int, n_probs: int = 0) -> list[Completion]:
    return [complete(url, p, n, n_probs=n_probs) for p in prompts]


def check_lossless(servers: Servers, setup: Setup, prompts: Sequence[str] = PROMPTS, n_predict: int = 128,
                   near_tie: float = NEAR_TIE, log: Callable[[str], None] = print) -> LosslessVerdict:
    with servers.serve(f"{setup.label} target", setup.base_args, draft=False) as url:
        plain = _greedy_all(url, prompts, n_predict)
        probed = _greedy_all(url, prompts, n_predict, n_probs=2)
    for i, (a, b) in enumerate(zip(plain, probed, strict=True)):
        if a.tokens != b.tokens:  # the reference must be one: the same server, asked twice
            raise BenchError(f"lossless {setup.label}: the target alone gave two answers to prompt {i} (with and "
                             "without n_probs): no reference to compare with")
    comparisons: list[Comparison] = []

    def judge(i: int, setting: str, got: Completion) -> None:
        ref = probed[i]
        c = compare(i, setting, ref.tokens, got.tokens, [ref.margin(p) for p in range(len(ref.tokens))],
                    [row[1].token if len(row) > 1 else None for row in ref.top], near_tie)
        comparisons.append(c)
        log(f"  {c.line()}")

    for i, prompt in enumerate(prompts):
        with servers.serve(f"{setup.label} spec fresh {i}", setup.spec_args, draft=True) as url:
            judge(i, "fresh", complete(url, prompt, n_predict))
    with servers.serve(f"{setup.label} spec sequence", setup.spec_args, draft=True) as url:
        for i, prompt in enumerate(prompts):
            judge(i, "sequence", complete(url, prompt, n_predict))
    return LosslessVerdict(setup.label, tuple(comparisons))


def check_acceptance(servers: Servers, setup: Setup, protocol: BenchProtocol,
                     log: Callable[[str], None] = print) -> Acceptance:
    with servers.serve(f"{setup.label} spec bench", setup.spec_args, draft=True) as url:
        spec = run_bench(url, protocol)
    if spec.error:
        raise BenchError(f"acceptance {setup.label}: the bench with the drafter failed: {spec.error}")
    with servers.serve(f"{setup.label} target bench", setup.base_args, draft=False) as url:
        target = run_bench(url, protocol)
    if target.error:
        raise BenchError(f"acceptance {setup.label}: the bench of the target alone failed: {target.error}")
    return measure(setup.label, spec, target)


def run_checks(servers: Servers, setups: Sequence[Setup], *, checks: Sequence[str], protocol: BenchProtocol,
               kv_types: Sequence[str] = (), n_predict: int = 128, log: Callable[[str], None] = print
               ) -> WorkloadReport:
    """The checks asked for over each setup, in order; an error in one check is kept and the next runs."""
    lossless: list[LosslessVerdict] = []
    acceptance: list[Acceptance] = []
    kvs: list[KvAgreement] = []
    errors: list[str] = []

    def attempt(what: str, fn: Callable[[], T]) -> T | None:
        log(f"{what} ...")
        try:
            return fn()
        except BenchError as exc:
            errors.append(f"{what}: {exc}")
            log(f"error: {what}: {exc}")
            return None

    for setup in setups:
        if "lossless" in checks:
            v = attempt(f"lossless {setup.label}", partial(check_lossless, servers, setup, n_predict=n_predict,
                                                           log=log))
            if v is not None:
                lossless.append(v)
                log(v.line())
        if "acceptance" in checks:
            a = attempt(f"acceptance {setup.label}", partial(check_acceptance, servers, setup, protocol, log=log))
            if a is not None:
                acceptance.append(a)
                log(a.line())
        for kv in kv_types if "kv" in checks else ():
            k = attempt(f"kv {setup.label} {kv}", partial(check_kv, servers, f"{setup.label} {kv}", setup.base_args,
                                                          (*setup.base_args, "-ctk", kv, "-ctv", kv), PROMPTS,
                                                          log=log))
            if k is not None:
                kvs.append(k)
    return WorkloadReport(tuple(lossless), tuple(acceptance), tuple(kvs), tuple(errors))
