"""`buildkit run --print --format k8s` with hostile values (issue 39, class 5): the arguments the pod's
llama-server gets, after Kubernetes' own $(VAR) expansion, are the ones given (`pa$$word` stays
pa$$word); --name is a whole DNS-1123 label or one error line (a trailing newline too); a model and a
draft of the same file name get distinct subPaths, so the draft's mount serves the draft."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from buildkit.plan.k8s import manifest
from buildkit.plan.profiles import ServerSpec, server_command
from test_k8s import DIGEST, REPO, container, k8s, objects, project  # noqa: F401 - project: a fixture

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
IMAGE = f"{REPO}@{DIGEST}"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # RFC 1123, as Kubernetes checks names


def expand(text: str, mapping: dict[str, str]) -> str:
    """Kubernetes' expansion of a container's command, args and env values, as kubelet does it
    (k8s.io/kubernetes third_party/forked/golang/expansion, Expand with MappingFuncFor): `$$` is `$`;
    `$(NAME)` is NAME's value when defined, else stays `$(NAME)`; `$(` with no `)` stays; `$` before
    anything else stays with it (Go's string(byte): a non-ASCII byte after `$` becomes its Latin-1
    character); a `$` at the very end stays. Bytes, as Go walks a string."""
    data = text.encode()
    out = bytearray()
    checkpoint = cursor = 0
    while cursor < len(data):
        if data[cursor:cursor + 1] == b"$" and cursor + 1 < len(data):
            out += data[checkpoint:cursor]
            rest = data[cursor + 1:]
            if rest[:1] == b"$":
                out += b"$"
                advance = 1
            elif rest[:1] == b"(":
                close = rest.find(b")", 1)
                if close >= 1:
                    name = rest[1:close].decode(errors="surrogateescape")
                    out += (mapping[name] if name in mapping else f"$({name})").encode(errors="surrogateescape")
                    advance = close + 1
                else:
                    out += b"$("
                    advance = 1
            else:
                out += b"$" + chr(rest[0]).encode()
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return (bytes(out) + data[checkpoint:]).decode(errors="surrogateescape")


def test_the_expansion_is_kubernetes_own():
    """The cases of expansion_test.go (TestMapReference and TestMapping) that our env can hold."""
    env = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
    for given_, meant in [("$(VAR_A)", "A"), ("___$(VAR_B)___", "___B___"), ("$(VAR_A)-$(VAR_A)", "A-A"),
                          ("$$(VAR_A)", "$(VAR_A)"), ("$$$(VAR_A)", "$A"), ("$$$$(VAR_A)", "$$(VAR_A)"),
                          ("$(VAR_DNE)", "$(VAR_DNE)"), ("$(VAR_A", "$(VAR_A"), ("$VAR_A", "$VAR_A"),
                          ("$(VAR_REF)", "$(VAR_A)"), ("$(VAR_EMPTY)", ""), ("f000-$$VAR_A", "f000-$VAR_A"),
                          ("foo\\$(VAR_C)bar", "foo\\Cbar"), ("$", "$"), ("$$", "$"), ("$()", "$()"),
                          ("pa$$word", "pa$word")]:
        assert expand(given_, env) == meant, given_


def spec(*args: str, model: str = "/data/t/model.gguf", draft: str | None = None) -> ServerSpec:
    return ServerSpec(image=IMAGE, model=Path(model), model_draft=Path(draft) if draft else None, args=args)


def pod_args(args: list[str], mapping: dict[str, str]) -> list[str]:
    return [expand(a, mapping) for a in args]


HOSTILE = ["pa$$word", "$(HOSTNAME)", "$$(X)", "$", "$$", "$(", "$()", "$(X", "$X", "a$", "$é", "${X}", "\\$(X)",
           "x: y", "~", "!!binary x", ">", "|", "#", "\n", "{", "[", "*a", "&a", "${{ x }}", "é", "\u2028"]
arg = st.sampled_from(HOSTILE) | st.text(max_size=12) | st.text(alphabet="$()X\\a", max_size=10)


@SETTINGS
@given(values=st.lists(arg, min_size=1, max_size=4))
@example(values=["--api-key", "pa$$word"])
@example(values=["--alias", "$(HOSTNAME)"])
def test_the_pod_gets_the_arguments_given_after_kubernetes_expansion(values):
    """Every name the args reference is defined (an env, envFrom or a later edit could define it):
    still no argument changes. (The schema check, a second per example, is the CLI tests'.)"""
    document = json.loads(json.dumps(manifest(spec("--alias", *values), image=IMAGE, name="chat", gpus=0)))
    args = container({i["kind"]: i for i in document["items"]})["args"]
    meant = server_command(spec("--alias", *values), port=8080)
    defined = {name: f"<{name}>" for a in args for name in _names(a)}
    assert pod_args(args, {}) == meant
    assert pod_args(args, defined) == meant


def _names(text: str) -> list[str]:
    out, start = [], text.find("$(")
    while start >= 0:
        end = text.find(")", start + 2)
        if end < 0:
            break
        out.append(text[start + 2:end])
        start = text.find("$(", end)
    return out


def test_a_password_with_dollars_reaches_the_server_as_given(project):  # noqa: F811 - the fixture
    c = container(objects(k8s("--image", IMAGE, "--model", "m.gguf", "--print", "--format", "k8s", "--",
                              "--api-key", "pa$$word", "--alias", "$(HOSTNAME)", images={})))
    assert pod_args(c["args"][-4:], {"HOSTNAME": "pod-1"}) == ["--api-key", "pa$$word", "--alias", "$(HOSTNAME)"]


@pytest.mark.parametrize("name", ["chat\n", "chat\r\n", "\nchat", "Chat_1", "-chat", "chat-", "a" * 64, "a.b", "é",
                                  "chat ", " "])
def test_a_name_that_is_not_a_whole_dns_label_is_one_line(project, name):  # noqa: F811 - the fixture
    result = k8s("--image", IMAGE, "--model", "m.gguf", "--print", "--format", "k8s", "--name", name, images={})
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --name "), result.output


@SETTINGS
@given(name=st.text(alphabet="abz09-_.\n A", min_size=1, max_size=66))
@example(name="chat\n")
def test_a_name_is_used_whole_or_refused(project, name):  # noqa: F811 - the fixture
    result = k8s("--image", IMAGE, "--model", "m.gguf", "--print", "--format", "k8s", "--name", name, images={})
    if result.exit_code == 0:
        assert DNS_LABEL.fullmatch(name), repr(name)
        items = objects(result)
        assert items["Deployment"]["metadata"]["name"] == items["Service"]["metadata"]["name"] == name
    else:
        assert result.exit_code == 1 and result.output.count("\n") == 1 and result.output.startswith("error: ")


def test_a_draft_of_the_models_file_name_gets_its_own_file(project, tmp_path):  # noqa: F811 - the fixture
    """t/model.gguf and d/model.gguf: the volume holds the model at its root and the draft under draft/,
    as /models holds them; each mount's subPath is the file its argument names."""
    c = container(objects(k8s("--image", IMAGE, "--model", "t/model.gguf", "--model-draft", "d/model.gguf",
                              "--print", "--format", "k8s", images={})))
    mounts = {m["mountPath"]: m["subPath"] for m in c["volumeMounts"]}
    assert len(set(mounts.values())) == len(mounts) == 2, mounts
    volume = tmp_path / "volume"  # the claim, filled as the manifest says
    (volume / "draft").mkdir(parents=True)
    (volume / "model.gguf").write_bytes(b"target")
    (volume / "draft" / "model.gguf").write_bytes(b"draft")
    served = {path: (volume / sub).read_bytes() for path, sub in mounts.items()}
    args = c["args"]
    assert served[args[args.index("--model") + 1]] == b"target"
    assert served[args[args.index("--model-draft") + 1]] == b"draft"

