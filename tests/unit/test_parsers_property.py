"""Property tests: every parser of outside input gives a value or a one-line BuildkitError, whatever it
is given; never another exception (a traceback for the user). Parsers: buildkit.toml, LLAMA_BUILDKIT_*
values and --set, the lock, the labels of an image to reproduce, image references, tags and versions,
registry challenges and source URLs with credentials."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from buildkit.plan.config import KEYS, load_config, parse_set_option, parse_text, read_config_file
from buildkit.core.errors import BuildkitError
from buildkit.oci.imageref import parse_image_ref
from buildkit.release.lockfile import Lock
from buildkit.plan.inputs import INPUTS_LABEL, LABEL_PREFIX
from buildkit.oci.registryauth import parse_www_authenticate
from buildkit.flows.reproduce.record import from_labels
from buildkit.plan.tags import check_repository, check_tag, next_version, parse_version
from buildkit.plan.tagset import release_tags
from buildkit.core.urlcreds import redact_text, split_credentials

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
OCI = "org.opencontainers.image."

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)


def one_line_or_value(call, *args, **kwargs):
    """call's value, or None when it raised a one-line BuildkitError; anything else fails the test."""
    try:
        return call(*args, **kwargs)
    except BuildkitError as exc:
        text = str(exc)
        assert text and "\n" not in text and "\r" not in text, repr(text)
        return None


# ------------------------------------------------------------------ config

KEY_NAMES = [k.name for k in KEYS]
SECTIONS = sorted({n.split(".")[0] for n in KEY_NAMES}) + ["profiles"]


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


toml_scalars = st.none().map(lambda _: "") | st.booleans() | st.integers(-2**31, 2**31) | st.text(max_size=30) \
    | st.floats(allow_nan=False, allow_infinity=False)
toml_values = st.recursive(toml_scalars.filter(lambda v: v != ""),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
tables = st.dictionaries(st.sampled_from(SECTIONS) | st.text(max_size=8),
                         st.dictionaries(st.sampled_from([n.split(".")[1] for n in KEY_NAMES]) | st.text(max_size=8),
                                         toml_values, max_size=5),
                         max_size=4)


@SETTINGS
@given(version=st.sampled_from(["1", "2", '"1"', "1.0", None]), data=tables)
def test_config_file_of_any_shape(tmp_path_factory, version, data) -> None:
    lines = [] if version is None else [f"schema_version = {version}"]
    for section, table in data.items():
        lines.append(f"[{json.dumps(section)}]")
        lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in table.items()]
    path = tmp_path_factory.mktemp("cfg") / "buildkit.toml"
    path.write_text("\n".join(lines) + "\n")
    got = one_line_or_value(read_config_file, path)
    if got is not None:
        assert set(got) <= set(KEY_NAMES)
        one_line_or_value(load_config, path, {}, {})


@SETTINGS
@given(raw=st.binary(max_size=300))
@example(raw=b"a = " + b"[" * 100_000)  # tomllib: RecursionError
def test_config_file_of_any_bytes(tmp_path_factory, raw) -> None:
    path = tmp_path_factory.mktemp("cfg") / "buildkit.toml"
    path.write_bytes(b"schema_version = 1\n" + raw)
    one_line_or_value(read_config_file, path)


@SETTINGS
@given(key=st.sampled_from(KEYS), text=st.text(max_size=40))
def test_environment_and_flag_values(key, text) -> None:
    one_line_or_value(parse_text, key, text, key.env_var)
    one_line_or_value(load_config, None, {key.env_var: text.replace("\0", "")}, {})
    one_line_or_value(load_config, None, {}, {key.name: (text, "--set")})


@SETTINGS
@given(items=st.lists(st.text(max_size=30), max_size=4))
def test_set_option(items) -> None:
    got = one_line_or_value(parse_set_option, tuple(items))
    if got is not None:
        one_line_or_value(load_config, None, {}, got)


# ------------------------------------------------------------------ lock

VALID_ENTRY = {
    "source_url": "https://example.invalid/fork.git", "ref": "main", "commit": "c" * 40, "build_number": 3,
    "patches": [], "patch_set_sha256": "0" * 64, "template": "cpu", "template_sha256": "1" * 64,
    "dockerfile_sha256": "2" * 64, "base_images": [{"ref": "debian:12", "digest": "sha256:" + "3" * 64}],
    "cuda_version": None, "cuda_root": None, "arch": "cpu", "cmake_archs": None, "target": "server",
    "platform": "linux/amd64", "no_vmm": True, "cmake_args": [], "source_date_epoch": 1700000000,
    "tool_version": "0.1.0", "image_name": "x/y", "image_digest": "sha256:" + "4" * 64, "image_id": "sha256:ab",
    "tags": ["x/y:cpu"], "variant": "cpu",
}


@SETTINGS
@given(raw=st.binary(max_size=200))
@example(raw=b"[" * 100_000)  # json.loads: RecursionError
def test_lock_of_any_bytes(tmp_path_factory, raw) -> None:
    path = tmp_path_factory.mktemp("lock") / "buildkit.lock"
    path.write_bytes(raw)
    one_line_or_value(Lock.read, path)
    assert path.read_bytes() == raw  # reading never changes it


@SETTINGS
@given(doc=st.dictionaries(st.sampled_from(["lock_version", "builds", "nightly"]) | st.text(max_size=6),
                           json_values | st.dictionaries(st.text(max_size=12), json_values, max_size=3), max_size=4))
def test_lock_of_any_json(tmp_path_factory, doc) -> None:
    path = tmp_path_factory.mktemp("lock") / "buildkit.lock"
    path.write_text(json.dumps(doc))
    got = one_line_or_value(Lock.read, path)
    if got is not None:
        for key in got.builds:  # every entry read (typed), and a complete one or one line
            one_line_or_value(got.entry, key)
        got.text()


@SETTINGS
@given(field=st.sampled_from(sorted(VALID_ENTRY) + ["bench", "labels", "pushed", "unknown"]), value=json_values,
       drop=st.booleans())
def test_lock_entry_with_one_field_changed(tmp_path_factory, field, value, drop) -> None:
    entry = dict(VALID_ENTRY)
    if drop:
        entry.pop(field, None)
    else:
        entry[field] = value
    path = tmp_path_factory.mktemp("lock") / "buildkit.lock"
    path.write_text(json.dumps({"lock_version": 1, "builds": {"cpu/server": entry}}))
    got = one_line_or_value(Lock.read, path)
    if got is not None:
        assert got.builds["cpu/server"].variant == entry.get("variant", "")
        one_line_or_value(got.entry, "cpu/server")


# ------------------------------------------------------------------ labels of an image to reproduce

INPUTS = {"format": 1, "base_images": [["debian:12", "sha256:" + "3" * 64]], "devel_image": "debian:12",
          "runtime_image": "debian:12", "provider": "nvidia", "platform": "linux/amd64", "jobs": 0, "ccache": True,
          "no_vmm": True, "extra_cmake_args": [], "patches": [], "cuda_wheels": None, "cublas": None}
LABELS = {OCI + "source": "https://example.invalid/f.git", OCI + "revision": "c" * 40, OCI + "version": "0.1.0",
          OCI + "created": "2024-01-02T00:00:00Z", LABEL_PREFIX + "arch": "cpu", LABEL_PREFIX + "target": "server",
          LABEL_PREFIX + "flags": "-DGGML_NATIVE=OFF", LABEL_PREFIX + "build-number": "3",
          LABEL_PREFIX + "patch-set": "0" * 64, LABEL_PREFIX + "template": "1" * 64,
          LABEL_PREFIX + "tool-version": "0.1.0", LABEL_PREFIX + "cuda-version": "none",
          INPUTS_LABEL: json.dumps(INPUTS)}


def test_valid_labels_give_a_record() -> None:
    assert from_labels(LABELS, "image x", image_digest="sha256:" + "5" * 64).inputs.build_number == 3


@SETTINGS
@given(name=st.sampled_from(sorted(LABELS)), value=st.text(max_size=40) | json_values, drop=st.booleans())
def test_labels_with_one_changed(name, value, drop) -> None:
    labels = dict(LABELS)
    if drop:
        labels.pop(name)
    else:
        labels[name] = value
    one_line_or_value(from_labels, labels, "image x", image_digest="sha256:" + "5" * 64)


@SETTINGS
@given(key=st.sampled_from(sorted(INPUTS)) | st.text(max_size=8), value=json_values, drop=st.booleans())
def test_inputs_label_with_one_key_changed(key, value, drop) -> None:
    inputs = dict(INPUTS)
    if drop:
        inputs.pop(key, None)
    else:
        inputs[key] = value
    labels = {**LABELS, INPUTS_LABEL: json.dumps(inputs)}
    one_line_or_value(from_labels, labels, "image x", image_digest="sha256:" + "5" * 64)


@SETTINGS
@given(labels=st.dictionaries(st.text(max_size=30), st.text(max_size=30), max_size=6))
def test_labels_of_any_kind(labels) -> None:
    one_line_or_value(from_labels, labels, "image x", image_digest="sha256:" + "5" * 64)


# ------------------------------------------------------------------ image references, tags, versions

ref_text = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789.:/@_-+ ", max_size=60) | st.text(max_size=40)


@SETTINGS
@given(text=ref_text)
def test_image_references(text) -> None:
    ref = one_line_or_value(parse_image_ref, text)
    if ref is not None:  # a parsed reference parses again to itself
        assert parse_image_ref(str(ref)) == ref


@SETTINGS
@given(text=st.text(max_size=140))
def test_tags_and_repositories(text) -> None:
    one_line_or_value(check_tag, text)
    one_line_or_value(check_repository, text)


@SETTINGS
@given(version=st.text(max_size=30) | st.from_regex(r"\A[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}(-[a-z0-9.]{1,12})?\Z"),
       commit=st.text(max_size=45), variant=st.text(max_size=30), default=st.booleans(),
       key=st.none() | st.text(max_size=30))
def test_release_tags(version, commit, variant, default, key) -> None:
    one_line_or_value(parse_version, version)
    got = one_line_or_value(release_tags, version, commit, variant, default_variant=default, build_key=key)
    if got is not None:
        assert all(check_tag(t) == t for t in got.all)


@SETTINGS
@given(tags=st.lists(st.text(max_size=30) | st.from_regex(r"\A[0-9]{1,2}\.[0-9]{1,2}\.[0-9]{1,2}-cpu\Z"),
                     max_size=6), bump=st.sampled_from(["patch", "minor", "major"]) | st.text(max_size=6))
def test_next_version(tags, bump) -> None:
    got = one_line_or_value(next_version, tags, "cpu", bump)
    if got is not None:
        parse_version(got)


# ------------------------------------------------------------------ registry answers and source URLs

@SETTINGS
@given(header=st.text(max_size=80) | st.from_regex(r'\A(Bearer|Basic) [a-z]+="[^"]*"(,[a-z]+=[^,]*)*\Z'))
def test_www_authenticate(header) -> None:
    parse_www_authenticate(header)  # a Challenge or None, never an exception


@SETTINGS
@given(url=st.text(max_size=60) | st.from_regex(r"\A(https?|ssh|git)://[a-z:%@0-9]{0,20}@?[a-z0-9.]{1,10}(:[0-9a-z]{0,6})?/[a-z]*\Z"))
def test_source_urls_with_credentials(url) -> None:
    got = one_line_or_value(split_credentials, url)
    if got is not None:
        clean, auth = got
        if auth is not None and auth.secret:
            # the credentials are out of the URL's userinfo (the host may still hold the same characters:
            # http://:0@0/ -> http://0/)
            parts = urlsplit(clean)
            assert parts.username is None and parts.password is None and "@" not in parts.netloc, clean
    redacted = redact_text(url)
    assert isinstance(redacted, str)


def test_a_stage_line_never_shows_the_secret_of_a_url(capsys):
    from buildkit.core.progress import Stages

    with Stages().stage("fetch", "http://ci:tok-123@127.0.0.1:9/fork.git"):
        pass
    err = capsys.readouterr().err
    assert "tok-123" not in err and "http://***@127.0.0.1:9/fork.git" in err
