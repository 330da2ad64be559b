"""`buildkit bench` and `buildkit run` against a real llama-server (marker e2e; `make test-e2e`).

The server is the real llama.cpp source built by `buildkit build --arch cpu` (tests/realserver.py,
session fixture `real_server_image`), serving a tiny GGUF model written with the `gguf` package
(tests/tinymodel.py). No fake server: figures are real tokens/s, streamed. Error cases put a
fault-injecting proxy (tests/faultproxy.py) between bench and the real server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import docker
import pytest
from click.testing import CliRunner

from buildkit.bench.benchmark import BENCH_LABEL
from buildkit.cli.main import main
from faultproxy import FaultProxy
from gitserver import free_port
from tinymodel import write_tiny_model
from cliutil import buildkit_env, default_sigint

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[2]
TEST_LABEL = "org.llama-buildkit.test"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    return docker.from_env()


def bench_containers(client) -> list:
    return client.containers.list(all=True, filters={"label": BENCH_LABEL})


def wait_health(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url}/health never answered 200")


@pytest.fixture(scope="module")
def server(real_server_image, tiny_model, client):
    """The real image serving the tiny model on 127.0.0.1 (started here with docker-py, not by bench)."""
    container = client.containers.run(
        real_server_image.ref, ["--host", "0.0.0.0", "--port", "8080", "--model", "/models/tiny.gguf",
                                "--ctx-size", "4096", "--parallel", "2"],
        detach=True, ports={"8080/tcp": ("127.0.0.1", None)}, labels={TEST_LABEL: "bench-e2e"},
        volumes={str(tiny_model): {"bind": "/models/tiny.gguf", "mode": "ro"}})
    try:
        container.reload()
        url = f"http://127.0.0.1:{container.ports['8080/tcp'][0]['HostPort']}"
        wait_health(url)
        yield url
    finally:
        container.remove(force=True)


@pytest.fixture(autouse=True)
def no_bench_container_left(client):
    yield
    left = bench_containers(client)
    for c in left:
        c.remove(force=True)
    assert not left, f"bench left containers behind: {[c.name for c in left]}"


def bench(*args: str, cwd: Path | None = None):
    """`buildkit bench ARGS` in this process; (exit code, stdout, stderr)."""
    runner = CliRunner()  # click >= 8.2: stdout and stderr apart
    old = os.getcwd()
    if cwd:
        os.chdir(cwd)
    try:
        result = runner.invoke(main, ["bench", *args], catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


def cli_env() -> dict:
    env = buildkit_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


# ------------------------------------------------------------------------------------ against --url


def test_default_protocol_on_the_real_server(server, real_server_image):
    code, out, err = bench("--url", server, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["error"] is None and len(doc["runs"]) == 3
    assert doc["protocol"]["max_tokens"] == 800 and doc["protocol"]["ignore_eos"] is True
    for r in doc["runs"]:
        # ignore_eos: every run generates the full length, and the server says so itself
        assert r["tokens"] == 800 and r["finish_reason"] == "length"
        assert r["client_tps"] > 0 and r["predicted_tps"] > 0 and r["prompt_tps"] > 0
        assert r["prompt_tokens"] > 20 and r["draft_n"] is None and r["acceptance"] is None
        assert 0 < r["ttft_s"] < r["wall_s"]
    s = doc["summary"]
    assert s["runs_done"] == 3 and s["tokens"] == 2400
    assert s["client_tps"]["min"] <= s["client_tps"]["mean"] <= s["client_tps"]["max"]
    assert isinstance(s["degraded"], bool) and s["last_vs_first"] > 0
    # the server that answered is the fork commit buildkit built (llama.cpp's build info)
    assert real_server_image.fork_commit[:7] in doc["target"]["server_build"]
    print("\nreal llama-server, tiny model, this CPU: client tok/s per run "
          + ", ".join(f"{r['client_tps']:.1f}" for r in doc["runs"])
          + f"; server gen tok/s mean {s['predicted_tps']['mean']:.1f}"
          + f", prompt tok/s mean {s['prompt_tps']['mean']:.1f}")

    code, out, err = bench("--url", server, "--runs", "2")  # the table
    assert code == 0, err
    assert out.splitlines()[1].split() == ["run", "tokens", "wall", "s", "tok/s", "ttft", "s", "prompt", "tok/s",
                                           "gen", "tok/s", "draft", "acc"]
    assert "degradation: " in out and "run 1: 800 tokens in" in err


def test_ignore_eos_is_what_makes_every_run_full_length(server):
    """With the end-of-sequence token pushed up (logit_bias), a plain request stops at once; the bench's
    request (ignore_eos) still generates max_tokens."""
    from buildkit.bench.benchmark import Protocol, endpoint, stream_chat
    from tinymodel import vocabulary

    eos = vocabulary()[0].index("<|im_end|>")
    ep = endpoint(server)
    for ignore_eos, tokens, finish in ((True, 100, "length"), (False, 0, "stop")):
        body = dict(Protocol(max_tokens=100, ignore_eos=ignore_eos).body(), logit_bias={str(eos): 100})
        result = stream_chat(ep, body, timeout=60)
        assert (result.tokens if ignore_eos else result.chunks, result.finish_reason) == (tokens, finish)


def test_concurrency_prompt_and_compare(server, tmp_path):
    first = tmp_path / "first.json"
    code, out, err = bench("--url", server, "--runs", "2", "--concurrency", "2", "--max-tokens", "64",
                           "--prompt", "Say hello.", "--output", str(first), "--json")
    assert code == 0, err
    doc = json.loads(out)
    for r in doc["runs"]:
        assert r["tokens"] == 128 and len(r["requests"]) == 2
        assert all(q["tokens"] == 64 and q["tokens_source"] == "usage" for q in r["requests"])
    assert doc["protocol"]["prompt"] == "Say hello." and json.loads(first.read_text())["runs"] == doc["runs"]

    code, out, err = bench("--url", server, "--runs", "2", "--concurrency", "2", "--max-tokens", "64",
                           "--prompt", "Say hello.", "--compare", str(first))
    assert code == 0, err
    ratio_line = next(ln for ln in out.splitlines() if ln.startswith("tok/s mean"))
    assert ratio_line.split()[-1].endswith("x") and float(ratio_line.split()[-1][:-1]) > 0
    assert "note:" not in out  # same protocol


@pytest.mark.parametrize("fault,message", [
    ("slow", r"error: run 2 of 3: no complete answer from http://127\.0\.0\.1:\d+/v1/chat/completions within 2s "
             r"\(--timeout\); 0 tokens received$"),
    ("invalid_json", r"error: run 2 of 3: invalid JSON in the response stream after \d tokens received: "
                     r"'\{\"choices\": \[\{\"index\": 0, \"delta\": \{\"content\": \"tru'$"),
    ("http500", r"error: run 2 of 3: HTTP 500 Internal Server Error from http://127\.0\.0\.1:\d+/v1/chat/completions: "
                r"injected failure: the model crashed$"),
    ("cut", r"error: run 2 of 3: the stream ended after \d tokens received without a finish reason "
            r"\(did the server crash\?\)$"),
    ("down_after", r"error: run 2 of 3: cannot connect to http://127\.0\.0\.1:\d+: connection refused "
                   r"\(is the server running\?\)$"),
], ids=["slow", "invalid_json", "http500", "cut", "down_after"])
def test_errors_are_one_line_and_the_runs_before_are_kept(server, fault, message):
    import re

    with FaultProxy(server, {1 if fault == "down_after" else 2: fault}, delay=5) as proxy:
        code, out, err = bench("--url", proxy.url, "--max-tokens", "64", "--timeout", "2", "--json")
    assert code == 1
    lines = err.strip().splitlines()
    assert re.match(message, lines[-1]), lines[-1]
    assert not any(ln.startswith("error:") for ln in lines[:-1]) and "Traceback" not in err
    doc = json.loads(out)  # partial results are still printed
    assert doc["error"] == lines[-1].removeprefix("error: ")
    assert len(doc["runs"]) == 1 and doc["runs"][0]["tokens"] == 64
    assert doc["summary"]["runs_done"] == 1 and doc["summary"]["runs_asked"] == 3

    with FaultProxy(server, {1 if fault == "down_after" else 2: fault}, delay=5) as proxy:  # and as a table
        code, out, err = bench("--url", proxy.url, "--max-tokens", "64", "--timeout", "2")
    last = out.splitlines()[-1]
    assert code == 1 and last.startswith("stopped: run 2 of 3: ") and last.endswith("(1 of 3 runs done, kept)")


def test_server_down_from_the_start():
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = bench("--url", url, "--json")
    assert code == 1
    assert err.strip().splitlines()[-1] == f"error: run 1 of 3: cannot connect to {url}: connection refused " \
                                           f"(is the server running?)"
    assert json.loads(out)["runs"] == []


# ------------------------------------------------------------------------------------ with --image


def test_bench_image_starts_measures_removes_and_attaches_to_the_lock(real_server_image, tiny_model, tmp_path,
                                                                      client):
    lock = tmp_path / "buildkit.lock"
    shutil.copy(real_server_image.lock, lock)
    code, out, err = bench("--image", real_server_image.ref, "--model", str(tiny_model), "--runs", "2",
                           "--max-tokens", "200", "--attach-lock", "--lock", str(lock), "--json",
                           "--", "--ctx-size", "2048", "--parallel", "1", cwd=tmp_path)
    assert code == 0, err
    doc = json.loads(out)
    assert [r["tokens"] for r in doc["runs"]] == [200, 200]
    target = doc["target"]
    assert target["image"] == real_server_image.ref and target["model"] == str(tiny_model)
    assert target["server_args"] == ["--ctx-size", "2048", "--parallel", "1"] and target["gpus"] is None
    assert target["image_id"] == client.images.get(real_server_image.ref).id
    assert "started container buildkit-bench-" in err and "removed container buildkit-bench-" in err
    assert bench_containers(client) == []
    entry = json.loads(lock.read_text())["builds"]["cpu/server"]
    assert entry["bench"]["runs"] == doc["runs"] and entry["bench"]["target"]["image_id"] == entry["image_id"]
    assert "attached the results to" in err


def test_draft_model_acceptance_is_reported(real_server_image, tiny_model, client):
    code, out, err = bench("--image", real_server_image.ref, "--model", str(tiny_model), "--model-draft",
                           str(tiny_model), "--runs", "1", "--max-tokens", "48", "--json",
                           "--", "--spec-type", "draft-simple", "--ctx-size", "2048", "--parallel", "1")
    assert code == 0, err
    (r,) = json.loads(out)["runs"]
    assert r["tokens"] == 48 and r["draft_n"] > 0 and 0 <= r["draft_accepted"] <= r["draft_n"]
    assert r["acceptance"] == pytest.approx(r["draft_accepted"] / r["draft_n"])
    # the draft is the model itself: greedy drafts are nearly all accepted
    assert r["acceptance"] > 0.5


def test_compare_image(real_server_image, tiny_model, client):
    # another image (a commit of a container of it: the same binaries, another id); bench refuses to
    # compare an image with itself
    other = f"buildkit-test/bench-compare:{uuid.uuid4().hex[:8]}"
    container = client.containers.create(real_server_image.ref)
    try:
        container.commit(*other.split(":"))
    finally:
        container.remove()
    try:
        code, out, err = bench("--image", real_server_image.ref, "--model", str(tiny_model), "--runs", "1",
                               "--max-tokens", "64", "--compare-image", other, "--json", "--", "--ctx-size", "2048")
    finally:
        client.images.remove(other, noprune=True)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["compare"]["base"]["target"]["image"] == other
    rows = {r["metric"]: r for r in doc["compare"]["rows"]}
    assert rows["tok/s mean"]["ratio"] > 0 and rows["runs done"]["base"] == rows["runs done"]["new"] == 1
    assert err.count("removed container") == 2


def test_a_server_that_cannot_start_is_one_line_and_leaves_nothing(real_server_image, tmp_path, client):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    code, out, err = bench("--image", real_server_image.ref, "--model", str(broken), "--startup-timeout", "60")
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: the server container exited (code 1) before it was ready"), err
    assert "removed container" in err and bench_containers(client) == []


def test_a_run_that_fails_inside_the_container_leaves_nothing(real_server_image, tiny_model, client):
    code, out, err = bench("--image", real_server_image.ref, "--model", str(tiny_model), "--timeout", "0.05",
                           "--json", "--", "--ctx-size", "2048")
    assert code == 1
    assert "within 0.05s (--timeout)" in err.strip().splitlines()[-1]
    assert bench_containers(client) == []


def test_missing_image_is_refused_before_anything_starts(tiny_model, client):
    code, out, err = bench("--image", f"buildkit-test/no-such-image:{uuid.uuid4().hex[:8]}", "--model",
                           str(tiny_model))
    assert code == 1 and "is not in the local engine (bench never pulls" in err.strip().splitlines()[-1]


# 128 + the signal (issue 22): 130 for Ctrl-C, 143 for SIGTERM, whose line names it
@pytest.mark.parametrize("sig,code,said", [(signal.SIGINT, 130, "interrupted"),
                                           (signal.SIGTERM, 143, "interrupted by SIGTERM")],
                         ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_and_sigterm_stop_and_remove_the_container(real_server_image, tiny_model, client, tmp_path, sig, code,
                                                           said):
    proc = subprocess.Popen([sys.executable, "-m", "buildkit.cli", "bench", "--image", real_server_image.ref,
                             "--model", str(tiny_model), "--runs", "1000", "--max-tokens", "400", "--json",
                             "--", "--ctx-size", "2048"],
                            cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    assert proc.stderr is not None  # a pipe
    try:
        seen = []
        for line in proc.stderr:  # wait until it measures
            seen.append(line)
            if line.startswith("run 2:"):
                break
        assert bench_containers(client), "".join(seen)
        proc.send_signal(sig)
        out, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, "".join(seen) + rest
    last = rest.strip().splitlines()[-1]
    assert last.startswith(f"error: {said} during run ") and last.endswith("runs done, kept)"), rest
    doc = json.loads(out)
    assert doc["interrupted"] is True and len(doc["runs"]) >= 2
    assert bench_containers(client) == []


# ------------------------------------------------------------------------------------ profiles and run


def test_profile_for_bench_and_run(real_server_image, tiny_model, tmp_path, client):
    shutil.copy(tiny_model, tmp_path / "tiny.gguf")
    (tmp_path / "buildkit.toml").write_text(f"""schema_version = 1
[profiles.tiny]
description = "the tiny test model on CPU"
image = "{real_server_image.ref}"
model = "tiny.gguf"
gpus = "none"
args = ["--ctx-size", "2048", "--parallel", "1", "--jinja"]
""")
    code, out, err = bench("--image", real_server_image.ref, "--profile", "tiny", "--runs", "1", "--max-tokens", "32",
                           "--json", cwd=tmp_path)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["target"]["profile"] == "tiny" and doc["target"]["server_args"][-1] == "--jinja"
    assert doc["runs"][0]["tokens"] == 32

    port, name = free_port(), f"buildkit-run-test-{uuid.uuid4().hex[:8]}"
    printed = subprocess.run([sys.executable, "-m", "buildkit.cli", "run", "--profile", "tiny", "--port", str(port),
                              "--bind", "127.0.0.1", "--name", name, "--detach", "--print"],
                             cwd=tmp_path, env=cli_env(), capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.startswith(f"docker run --rm --detach --name {name} --publish 127.0.0.1:{port}:8080 ")
    try:
        started = subprocess.run([sys.executable, "-m", "buildkit.cli", "run", "--profile", "tiny", "--port",
                                  str(port), "--bind", "127.0.0.1", "--name", name, "--detach"],
                                 cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        container = client.containers.get(name)
        assert container.attrs["HostConfig"]["Binds"] == [f"{(tmp_path / 'tiny.gguf').resolve()}:/models/tiny.gguf:ro"]
        url = f"http://127.0.0.1:{port}"
        wait_health(url)
        code, out, err = bench("--url", url, "--runs", "1", "--max-tokens", "16", "--json")
        assert code == 0, err
        assert json.loads(out)["runs"][0]["tokens"] == 16
    finally:
        try:
            client.containers.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass
