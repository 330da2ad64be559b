"""A stand-in for GitHub's runner, enough to run a generated workflow's jobs on this machine.

It reads the workflow with PyYAML and runs one job at a time, the way GitHub wires them: the job's
`if` (default `success()`), `strategy.matrix` (an `include` list, or an expression such as
`${{ fromJSON(needs.plan.outputs.matrix) }}`), `env` at workflow, job and step level, each step's
`if`, `continue-on-error`, `${{ }}` expressions (matrix, needs.<job>.outputs/result,
steps.<id>.outputs/outcome, github, inputs, secrets; `&&`, `||`, `!`, `==`, `!=`, fromJSON,
contains, always, success, failure, cancelled), $GITHUB_OUTPUT (NAME=VALUE and NAME<<DELIM) and the job's
`outputs`. A `run:` step runs with bash -eo pipefail in the job's workspace, a fresh folder per
job (a new runner); a `uses:` step is answered by the caller's stand-in for that action.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable

import yaml

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>&&|\|\||==|!=|!|\(|\)|,)"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_.\-*]*))")
_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)


class Expression:
    """One `${{ }}` expression, evaluated against a context (dicts) and a job status."""

    def __init__(self, text: str, context: dict, status: str = "success") -> None:
        self.tokens = self._tokens(text)
        self.pos, self.context, self.status = 0, context, status

    @staticmethod
    def _tokens(text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text.rstrip()):
            m = _TOKEN.match(text, pos)
            kind = m.lastgroup if m else None  # a token's group (the name that matched)
            if not m or m.end() == pos or kind is None:
                raise ValueError(f"cannot read the expression {text!r} at {pos}")
            out.append((kind, m.group(kind)))
            pos = m.end()
        return out

    def value(self) -> Any:
        result = self._or()
        if self.pos != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self.pos]}")
        return result

    def _peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def _take(self) -> tuple[str, str]:
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _or(self) -> Any:
        left = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            left = left if truthy(left) else right
        return left

    def _and(self) -> Any:
        left = self._cmp()
        while self._peek() == "&&":
            self._take()
            right = self._cmp()
            left = right if truthy(left) else left
        return left

    def _cmp(self) -> Any:
        left = self._unary()
        if self._peek() in ("==", "!="):
            op = self._take()[1]
            right = self._unary()
            same = _loose(left) == _loose(right)
            return same if op == "==" else not same
        return left

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not truthy(self._unary())
        return self._primary()

    def _primary(self) -> Any:
        kind, text = self._take()
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if text == "(":
            inner = self._or()
            assert self._take()[1] == ")"
            return inner
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if self._peek() == "(":
            self._take()
            args = []
            while self._peek() != ")":
                args.append(self._or())
                if self._peek() == ",":
                    self._take()
            self._take()
            return self._call(text, args)
        return self._lookup(text)

    def _call(self, name: str, args: list) -> Any:
        status = {"always": lambda: True, "success": lambda: self.status == "success",
                  "failure": lambda: self.status == "failure", "cancelled": lambda: False}
        if name in status:
            return status[name]()
        if name == "fromJSON":
            return json.loads(args[0])
        if name == "contains":  # an array holds an item, or a string a substring; case-insensitive, as GitHub
            search, item = args
            if isinstance(search, list):
                return any(_loose(x) == _loose(item) for x in search)
            return text_of(item).lower() in text_of(search).lower()
        raise ValueError(f"the stand-in runner has no function {name}()")

    def _lookup(self, path: str) -> Any:
        value: Any = self.context
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", 0.0)


def _loose(value: Any) -> Any:
    """GitHub compares strings case-insensitively and null as ''."""
    if value is None:
        return ""
    return value.lower() if isinstance(value, str) else value


def text_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def substitute(value: Any, context: dict, status: str = "success") -> Any:
    """A value of the workflow with its expressions evaluated: a string that is one expression gives
    that expression's value (an object stays an object), others get each expression's text."""
    if isinstance(value, dict):
        return {k: substitute(v, context, status) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, context, status) for v in value]
    if not isinstance(value, str):
        return value
    whole = _EXPR.fullmatch(value.strip())
    if whole:
        return Expression(whole.group(1), context, status).value()
    return _EXPR.sub(lambda m: text_of(Expression(m.group(1), context, status).value()), value)


def condition(text: Any, context: dict, status: str) -> bool:
    if text is None:
        text = "success()"
    if isinstance(text, bool):
        return text
    text = str(text).strip()
    inner = _EXPR.fullmatch(text)
    result = Expression(inner.group(1) if inner else text, context, status).value()
    # a condition without a status function is `success() && (it)`, as GitHub has it
    if not re.search(r"\b(always|success|failure|cancelled)\(", text):
        return status == "success" and truthy(result)
    return truthy(result)


def read_outputs(path: Path) -> dict[str, str]:
    """$GITHUB_OUTPUT's NAME=VALUE and NAME<<DELIMITER ... DELIMITER forms."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        name, _, value = line.partition("=")
        out[name] = value
        i += 1
    return out


@dataclass
class StepRecord:
    name: str
    ran: bool
    outcome: str  # success, failure, skipped
    output: str = ""
    seconds: float = 0.0  # wall time of a run step here (reported, never asserted)


@dataclass
class JobResult:
    name: str
    result: str  # success, failure, skipped
    outputs: dict[str, str] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    workspace: Path | None = None
    seconds: float = 0.0  # wall time of the job here (reported, never asserted)

    def step(self, name_start: str) -> StepRecord:
        return next(s for s in self.steps if s.name.startswith(name_start))


# uses: -> (inputs after evaluation, the job's workspace) -> (outputs, outcome)
StandIn = Callable[[dict, Path], dict]


class Runner:
    """Runs the jobs of one workflow file; `stand_ins` maps an action (`actions/cache/restore`,
    without @version) to its stand-in; `skip` names run-steps (by name prefix) the stand-in runner
    does not execute, each with the reason (they set up GitHub's machine, not this one)."""

    def __init__(self, workflow: Path, *, env: dict[str, str], stand_ins: dict[str, StandIn],
                 skip: dict[str, str], context: dict, work_root: Path) -> None:
        self.doc = yaml.safe_load(workflow.read_text())
        self.env, self.stand_ins, self.skip = env, stand_ins, skip
        self.context, self.work_root = context, work_root
        self.counter = 0

    @property
    def jobs(self) -> dict:
        return self.doc["jobs"]

    def matrix(self, job: str, needs: dict[str, JobResult]) -> list[dict]:
        """The matrix combinations of a job: its include list, after the expressions."""
        strategy = self.jobs[job].get("strategy") or {}
        if "matrix" not in strategy:
            return [{}]
        matrix = substitute(strategy["matrix"], self._context(needs, {}, {}))
        assert set(matrix) == {"include"}, f"only include lists are stood in for: {matrix}"
        return matrix["include"]

    def _context(self, needs: dict[str, JobResult], matrix: dict, steps: dict) -> dict:
        return {**self.context, "matrix": matrix, "steps": steps,
                "needs": {n: {"outputs": r.outputs, "result": r.result} for n, r in needs.items()}}

    def run_job(self, job: str, needs: dict[str, JobResult], matrix: dict | None = None,
                timeout: float = 1200) -> JobResult:
        spec = self.jobs[job]
        wanted = spec.get("needs") or []
        wanted = [wanted] if isinstance(wanted, str) else wanted
        assert set(wanted) == set(needs), f"{job} needs {wanted}, given {sorted(needs)}"
        status = "success" if all(r.result == "success" for r in needs.values()) else "failure"
        context = self._context(needs, matrix or {}, {})
        if not condition(spec.get("if"), context, status):
            return JobResult(job, "skipped", {n: "" for n in spec.get("outputs") or {}})
        self.counter += 1
        start = time.monotonic()
        workspace = self.work_root / f"{self.counter:02d}-{job}" / "workspace"
        workspace.mkdir(parents=True)
        temp = workspace.parent / "runner-temp"
        temp.mkdir()
        steps: dict[str, dict] = {}
        records: list[StepRecord] = []
        job_status = "success"
        base_env = {**self.env, **substitute(self.doc.get("env") or {}, context)}
        base_env.update({k: text_of(v) for k, v in substitute(spec.get("env") or {}, context).items()})
        summary = temp / "step-summary.md"
        for step in spec["steps"]:
            context = self._context(needs, matrix or {}, steps)
            name = step.get("name") or step.get("uses") or step["run"].splitlines()[0]
            if not condition(step.get("if"), context, job_status):
                records.append(StepRecord(name, False, "skipped"))
                if "id" in step:
                    steps[step["id"]] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
                continue
            outputs, outcome, text = {}, "success", ""
            if "uses" in step:
                action = step["uses"].split("@")[0]
                stand_in = self.stand_ins.get(action)
                assert stand_in is not None, f"no stand-in for {step['uses']} (step {name!r})"
                try:
                    outputs = stand_in(substitute(step.get("with") or {}, context), workspace)
                except AssertionError as exc:
                    outcome, text = "failure", str(exc)
            elif any(name.startswith(prefix) for prefix in self.skip):
                records.append(StepRecord(name, False, "success", "not run here: " + next(
                    why for prefix, why in self.skip.items() if name.startswith(prefix))))
                continue
            else:
                out_file = temp / f"output-{len(records)}"
                out_file.touch()
                env = {**base_env, **{k: text_of(v) for k, v in substitute(step.get("env") or {}, context).items()},
                       "GITHUB_OUTPUT": str(out_file), "GITHUB_STEP_SUMMARY": str(summary),
                       "GITHUB_WORKSPACE": str(workspace), "RUNNER_TEMP": str(temp)}
                script = temp / f"step-{len(records)}.sh"
                script.write_text(substitute(step["run"], context))
                began = time.monotonic()
                proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                                      cwd=workspace, env=env, capture_output=True, text=True, timeout=timeout)
                text = proc.stdout + proc.stderr
                outcome = "success" if proc.returncode == 0 else "failure"
                outputs = read_outputs(out_file)
            conclusion = "success" if outcome == "success" or step.get("continue-on-error") else "failure"
            if "id" in step:
                steps[step["id"]] = {"outputs": outputs, "outcome": outcome, "conclusion": conclusion}
            records.append(StepRecord(name, True, outcome, text, time.monotonic() - began if "run" in step else 0.0))
            if conclusion == "failure":
                job_status = "failure"
        context = self._context(needs, matrix or {}, steps)
        outputs = {k: text_of(v) for k, v in substitute(spec.get("outputs") or {}, context).items()}
        return JobResult(job, job_status, outputs, records, workspace, time.monotonic() - start)


# ------------------------------------------------------------------ stand-ins for the actions used

def copy_tree(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True)


class CacheStore:
    """actions/cache's restore and save, and `gh cache delete`, over a folder (one entry per key)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.order: list[str] = []  # keys, oldest first (the newest prefix match wins, as on GitHub)

    def keys(self) -> list[str]:
        return [k for k in self.order if (self.root / k).exists()]

    def restore(self, inputs: dict, workspace: Path) -> dict:
        key = inputs["key"]
        prefixes = [p.strip() for p in str(inputs.get("restore-keys") or "").splitlines() if p.strip()]
        match = key if key in self.keys() else next(
            (k for p in prefixes for k in reversed(self.keys()) if k.startswith(p)), "")
        if match:
            copy_tree(self.root / match, workspace / inputs["path"])
        return {"cache-hit": "true" if match == key else "false", "cache-matched-key": match,
                "cache-primary-key": key}

    def save(self, inputs: dict, workspace: Path) -> dict:
        key = inputs["key"]
        assert (workspace / inputs["path"]).exists(), f"nothing at {inputs['path']} to save"
        if key not in self.keys():
            copy_tree(workspace / inputs["path"], self.root / key)
            self.order.append(key)
        return {}

    def gh_script(self, bindir: Path, log: Path) -> None:
        """A `gh` on PATH answering `gh cache delete KEY --repo R` from this store."""
        bindir.mkdir(parents=True, exist_ok=True)
        gh = bindir / "gh"
        gh.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n'
                      f'[ "$1 $2" = "cache delete" ] || {{ echo "gh stand-in: only cache delete" >&2; exit 2; }}\n'
                      f'[ -d "{self.root}/$3" ] || {{ echo "no cache entry $3" >&2; exit 1; }}\n'
                      f'rm -rf "{self.root}/$3"\n')
        gh.chmod(0o755)


class ArtifactStore:
    """actions/upload-artifact and download-artifact (pattern, merge-multiple) over a folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def names(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir())

    def upload(self, inputs: dict, workspace: Path) -> dict:
        src = workspace / inputs["path"]
        if not src.exists():
            assert inputs.get("if-no-files-found") == "ignore", f"no file at {inputs['path']}"
            return {}
        dest = self.root / inputs["name"]
        assert not dest.exists(), f"artifact {inputs['name']} uploaded twice"
        dest.mkdir()
        shutil.copy2(src, dest / src.name)
        return {}

    def download(self, inputs: dict, workspace: Path) -> dict:
        import fnmatch

        assert inputs.get("merge-multiple") in (True, "true"), "only merged downloads are stood in for"
        dest = workspace / inputs["path"]
        dest.mkdir(parents=True, exist_ok=True)
        for name in self.names():
            if fnmatch.fnmatch(name, inputs["pattern"]):
                copy_tree(self.root / name, dest)
        return {}


def no_op(inputs: dict, workspace: Path) -> dict:
    return {}


# the context a nightly workflow's expressions read (github, inputs, secrets), as a run of it gives them
NIGHTLY_CONTEXT: dict[str, Any] = {"github": {"token": "not-a-token", "run_id": "4242"}, "inputs": {"force": False},
                                   "secrets": {"REGISTRY_USERNAME": "u", "REGISTRY_PASSWORD": "p"}}


def nightly_stand_ins(checkout: StandIn, cache: CacheStore, artifacts: ArtifactStore,
                      login: StandIn = no_op) -> dict[str, StandIn]:
    """The `uses:` actions of the generated nightly workflow, answered by file copies (checkout, cache,
    artifacts) or nothing (setup-python, setup-buildx, and login unless given)."""
    return {"actions/checkout": checkout, "actions/setup-python": no_op, "docker/login-action": login,
            "docker/setup-buildx-action": no_op, "actions/cache/restore": cache.restore,
            "actions/cache/save": cache.save, "actions/upload-artifact": artifacts.upload,
            "actions/download-artifact": artifacts.download}


def runner_env(bindir: Path, extra: dict[str, str]) -> dict[str, str]:
    """This process's environment, bindir first on PATH, GitHub's CI variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "LLAMA_BUILDKIT_"))}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env.update({"CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "acme/llama-nightly",
                "GITHUB_RUN_ID": "4242"})
    env.update(extra)
    return env
