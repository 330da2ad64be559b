"""`buildkit ci github` with hostile values in every value field (issue 39, class 5): each one is either
refused in one line or read back by a YAML parser as exactly what was given: `runs-on` the very label
(never null, empty or a mapping), the login's registry, the install line, the config path in every
buildkit command. Strings YAML reads as something else: `x: y` (a mapping), `~` (null), `!!binary x`
(a tag), `>` and `|` (block scalars), `#` (a comment), `{`, `[` (flow collections), `*a`, `&a` (alias,
anchor), line breaks, `${{ }}`, `$(X)`, `$$`, unicode."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from buildkit.core.errors import BuildkitError
from buildkit.flows.nightly.ciworkflow import WorkflowOptions, render_workflow

REPO = "https://github.com/acme/llama-buildkit"
IMAGE = "registry.example.com/team/l"
BASE = WorkflowOptions(registry="registry.example.com", install=f"git+{REPO}@v1", cache_ref=IMAGE, image=IMAGE,
                       bench_runner="self-hosted,gpu", bench_image=IMAGE, bench_variant="cpu",
                       bench_model="/m/q.gguf", bench_profile="fast")
ISSUE = ["x: y", "~", "!!binary x", ">"]  # the values issue 39 found
HOSTILE = [*ISSUE, "|", "#", "a #b", "x\n", "a\nb", "a\rb", "{", "[a]", "*a", "&a", "- a", "? a", "null", "true",
           "1.0", "'a'", '"a"', "%a", "@a", "a:", " a", "a,b", "é", "\u2028", "\x85", "${{ x }}", "$(X)", "$$", ""]


def field_options(field: str, value: str) -> WorkflowOptions:
    """BASE with value in field; install: the value is the --buildkit-ref of git+URL@REF."""
    if field == "install":
        return replace(BASE, install=f"git+{REPO}@{value}")
    if field == "runner":
        return replace(BASE, runners=(("amd64", value),))
    fields: dict[str, Any] = {field: value}
    return replace(BASE, **fields)


def steps(doc: dict, job: str) -> list[dict]:
    return doc["jobs"][job]["steps"]


def step_named(doc: dict, job: str, start: str) -> dict:
    return next(s for s in steps(doc, job) if str(s.get("name", "")).startswith(start))


def runs(doc: dict, start: str = "buildkit ") -> list[str]:
    return [s["run"] for job in doc["jobs"] for s in steps(doc, job) if "run" in s and s["run"].startswith(start)]


def read_back(doc: dict, field: str, value: str) -> list[tuple[Any, Any]]:
    """(what the parsed workflow holds, what was meant) for the places field's value goes."""
    jobs = doc["jobs"]
    if not value and field == "image":  # optional: then left out
        return [(any("--image" in run for run in runs(doc, "buildkit nightly ")), False)]
    if not value and field == "bench_runner":
        return [("bench" in jobs, False)]
    if not value and field == "bench_profile":
        return [(any("--profile" in run for run in runs(doc, "buildkit bench ")), False)]
    bench = step_named(doc, "bench", "Bench the new nightly")["run"] if "bench" in jobs else ""
    if field == "registry":
        return [(step_named(doc, job, "Log in to ")["with"]["registry"], value) for job in jobs] + \
               [(step_named(doc, job, "Log in to ")["name"], f"Log in to {value}") for job in jobs]
    if field == "python_version":
        return [(step_named(doc, job, "Set up Python")["with"]["python-version"], value) for job in jobs]
    if field == "install":
        return [(step_named(doc, job, "Install buildkit")["run"], f'python -m pip install "git+{REPO}@{value}"')
                for job in jobs]
    if field == "config":
        return [(f'--config "{value}"' in run, True) for run in runs(doc)] + [(len(runs(doc)) >= 6, True)]
    if field == "image":
        return [(f'--image "{value}"' in run, True) for run in runs(doc, "buildkit nightly ")]
    if field == "summary_file":
        return [(step_named(doc, "assemble", "Upload the summary")["with"]["path"], value),
                (f'--summary "{value}"' in runs(doc, "buildkit nightly --assemble")[0], True)]
    if field == "builder_driver":
        return [(step_named(doc, "build", "Set up Docker Buildx")["with"]["driver"], value)]
    if field == "plan_runner":
        return [(jobs["plan"]["runs-on"], value), (jobs["assemble"]["runs-on"], value)]
    if field == "runner":
        return [(f'--runner "amd64={value}"' in runs(doc, "buildkit nightly --plan")[0], True)]
    if field == "cache_ref":
        return [(f'"type=registry,ref={value}:buildcache-$UNIT,mode=max"' in runs(doc, "buildkit nightly --job")[0],
                 True)]
    if field == "bench_runner":
        return [(jobs["bench"]["runs-on"], [label.strip() for label in value.split(",")])]
    if field == "bench_image":
        return [(f'--image "{value}:nightly-cpu" --compare-image "{value}:cpu"' in bench, True)]
    if field == "bench_model":
        return [(f'--model "{value}"' in bench, True)]
    if field == "bench_profile":
        return [(f'--profile "{value}"' in bench, True)]
    raise AssertionError(field)


FIELDS = ["registry", "python_version", "install", "config", "image", "summary_file", "builder_driver",
          "plan_runner", "runner", "cache_ref", "bench_runner", "bench_image", "bench_model", "bench_profile"]


def rendered(options: WorkflowOptions) -> dict | None:
    """The workflow parsed back, or None when render_workflow refused it in one line."""
    try:
        text = render_workflow(options)
    except BuildkitError as exc:
        assert str(exc) and "\n" not in str(exc) and "\r" not in str(exc), repr(str(exc))
        return None
    doc = yaml.safe_load(text)  # a YAMLError here is the bug
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("value", ISSUE)
@pytest.mark.parametrize("field", FIELDS)
def test_values_yaml_reads_as_something_else_are_written_as_the_text_they_are(field, value):
    """Not refused (each is a label, path or ref a user may give), and read back exactly."""
    doc = rendered(field_options(field, value))
    assert doc is not None, f"{field}={value!r} was refused"
    for got, meant in read_back(doc, field, value):
        assert got == meant


hostile = (st.sampled_from(HOSTILE) | st.text(max_size=12)
           | st.builds(lambda a, b, c: a + b + c, st.sampled_from(HOSTILE), st.text(max_size=3),
                       st.sampled_from(HOSTILE)))


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=hostile)
@example(field="plan_runner", value="ubuntu-latest\n")
@example(field="config", value="a: b\n")
def test_every_value_is_refused_in_one_line_or_read_back_exactly(field, value):
    doc = rendered(field_options(field, value))
    if doc is None:
        return
    for got, meant in read_back(doc, field, value):
        assert got == meant, (field, value)
    assert "${{" not in value  # no value becomes an expression (round two): one that could is refused


@pytest.mark.parametrize("value", [*ISSUE, "cpu\n", "a b", "a'b"])
def test_the_bench_variant_is_a_variant_name_or_refused(value):
    """It goes unquoted into a run line and into an expression's string: a name or nothing."""
    assert rendered(replace(BASE, bench_variant=value)) is None


@pytest.mark.parametrize("value,message", [("x: y", "does not read back as YAML"),
                                           ("~", "does not read back --plan-runner as given: None")])
def test_a_template_that_writes_a_value_unserialized_is_caught_before_the_file_is_written(tmp_path, value, message):
    """render_workflow reads its own output back: a template edit that drops the yaml filter is an
    error at generation time, not a workflow GitHub cannot run."""
    from buildkit.core.paths import templates_dir

    (tmp_path / "ci").mkdir()
    template = (templates_dir() / "ci" / "github-nightly.yml.j2").read_text()
    assert "runs-on: {{ plan_runner|yaml }}" in template
    (tmp_path / "ci" / "github-nightly.yml.j2").write_text(
        template.replace("runs-on: {{ plan_runner|yaml }}", "runs-on: {{ plan_runner }}"))
    with pytest.raises(BuildkitError, match=message):
        render_workflow(replace(BASE, plan_runner=value), tmp_path)
    assert rendered(replace(BASE, plan_runner=value)) is not None  # the project's template carries it
