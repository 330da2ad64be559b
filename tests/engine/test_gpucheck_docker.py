"""`buildkit build --tests` and `buildkit gpu-check` on the real engine (issue 37 items 1 and 5), with the
example fork's stand-in test-backend-ops (examples/tiny-fork/tests: the real program's command line and console
format, for the stand-in's own CPU library; this host has no GPU, so the backend under test is CPU).

One cpu build of the fork's commit, which the other cpu tests of the engine tier build too (same tree, same
layers), then its tests target; then the same commit with a patch in the queue that makes ggml_argmax_rows
write a second row past its output, as the fork's CUDA argmax does (issue 37): the gate refuses it by name.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from buildkit.oci.registry import RegistryClient
from buildkit.release.publish import image_labels
from cliutil import cli_env, write_project
from forkrepo import make_fork_repo
from images import remove_local_images

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-fork"
IMAGE = "buildkit-test/tiny-fork-gpucheck"
ARGMAX = "ARGMAX(type=f32,ne=[32,513,1,1])"


def buildkit(project: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=1800)


def stray_write_patch() -> str:
    """A patch of the queue: ggml_argmax_rows also writes dst[nrows + r] for a large input."""
    before = (EXAMPLE / "ggml" / "src" / "ggml.c").read_text()
    after = before.replace("        dst[r] = best;\n",
                           "        dst[r] = best;\n        if (nrows > 256) {\n            dst[nrows + r] = 0;\n"
                           "        }\n")
    assert after != before
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), "a/ggml/src/ggml.c",
                                        "b/ggml/src/ggml.c"))


@pytest.fixture(scope="module")
def project(tmp_path_factory, git_daemon, debian_base_image, docker_engine):
    repo = tmp_path_factory.mktemp("upstream") / "tiny-fork"
    _, fork_sha = make_fork_repo(repo, EXAMPLE)
    root = tmp_path_factory.mktemp("project")
    write_project(root, source={"url": git_daemon.url_for(repo), "commit": fork_sha, "patch_dir": "patches"},
                  image={"name": IMAGE}, build={"jobs": 2, "arch": "cpu"},
                  base={"provider": "wheels", "os_image": debian_base_image})
    env = cli_env(tmp_path_factory.getbasetemp() / "buildkit-cache")
    env["LLAMA_BUILDKIT_BUILD_PROGRESS"] = "plain"
    yield root, env
    client = docker.from_env()
    for image in client.images.list(name=IMAGE):  # :cpu, :cpu-tests and the build's bk- and sha- tags
        for tag in image.tags:
            if tag.startswith(IMAGE + ":"):
                try:
                    client.images.remove(tag, force=True)
                except docker.errors.APIError:
                    pass


def lock_entry(root: Path) -> dict:
    return json.loads((root / "buildkit.lock").read_text())["builds"]["cpu/server"]


def test_the_tests_target_leaves_the_image_as_it_is_and_gpu_check_judges_its_run(project, tmp_path):
    root, env = project
    done = buildkit(root, env, "build")
    assert done.returncode == 0, done.stderr[-3000:]
    digest = lock_entry(root)["image_digest"]
    # the image itself has no test program: one line, not a traceback
    done = buildkit(root, env, "gpu-check", f"{IMAGE}:cpu", "-b", "CPU", "--gpus", "none")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        f"error: gpu-check could not run /app/test-backend-ops in {IMAGE}:cpu")

    done = buildkit(root, env, "build", "--tests")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"tests image: {IMAGE}:cpu-tests" in done.stdout
    assert lock_entry(root)["image_digest"] == digest  # the server image's digest, with or without the tests
    client = docker.from_env()
    tests = client.images.get(f"{IMAGE}:cpu-tests")
    assert not any(k.startswith("org.opencontainers") for k in tests.labels)  # never found as the image
    listing = {ref: client.containers.run(ref, ["/app"], entrypoint=["ls"], remove=True).decode().split()
               for ref in (f"{IMAGE}:cpu", f"{IMAGE}:cpu-tests")}
    assert "test-backend-ops" not in listing[f"{IMAGE}:cpu"] and "llama-server" in listing[f"{IMAGE}:cpu"]
    assert listing[f"{IMAGE}:cpu-tests"] == sorted(listing[f"{IMAGE}:cpu"] + ["test-backend-ops"])

    release = tmp_path / "release.json"
    done = buildkit(root, env, "gpu-check", f"{IMAGE}:cpu-tests", "-b", "CPU", "--gpus", "none", "--attach-lock",
                    "--lock-entry", "cpu/server", "--json", str(release))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == "gpu-check CPU: PASS 6/6 cases passed"
    assert lock_entry(root)["gpu_check"]["ok"] is True

    # where there is no Docker: the tests image's bundle, its test-backend-ops run by gpu_run.py on this host's
    # libraries, and its log judged here again and recorded
    archive, bundle, out = tmp_path / "tests.tar", tmp_path / "tests.tar.xz", tmp_path / "gpu-run-out"
    subprocess.run(["docker", "save", f"{IMAGE}:cpu-tests", "-o", str(archive)], check=True, timeout=300)
    gpu_run = [sys.executable, str(ROOT / "scripts" / "gpu_run.py")]
    done = subprocess.run([*gpu_run, "extract", str(archive), "-o", str(bundle), "--xz-preset", "0"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    done = subprocess.run([*gpu_run, "backend-ops", str(bundle), "-b", "CPU", "--work", str(tmp_path / "work"),
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "gpu-check CPU: PASS 6/6 cases passed"
    assert json.loads((out / "gpu-check.json").read_text())["ok"] is True
    done = buildkit(root, env, "gpu-check", "--log", str(out / "backend-ops.log"), "-b", "CPU", "--attach-lock",
                    "--lock-entry", "cpu/server")
    assert done.returncode == 0 and done.stdout.splitlines()[0] == "gpu-check CPU: PASS 6/6 cases passed"

    # the default backend, CUDA0, is not on a CPU image: no result, not a pass
    done = buildkit(root, env, "gpu-check", f"{IMAGE}:cpu-tests", "--gpus", "none", "-o", "ARGMAX")
    assert done.returncode == 1 and "backend CUDA0 was not tested (this host has CPU)" in done.stdout

    # the nightly: the same commit with the stray write in the patch queue
    (root / "patches" / "0001-argmax-stray-write.patch").write_text(stray_write_patch())
    done = buildkit(root, env, "build", "--tests")
    assert done.returncode == 0, done.stderr[-3000:]
    assert lock_entry(root).get("gpu_check") is None  # a rebuild clears the old result
    summary = tmp_path / "summary.md"
    done = buildkit(root, env, "gpu-check", f"{IMAGE}:cpu-tests", "-b", "CPU", "--gpus", "none", "--compare",
                    str(release), "--step-summary", str(summary))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert done.stdout.startswith("gpu-check CPU: FAIL 3/6 cases passed, 3 failing: ")  # in the run's order
    assert f"{ARGMAX} (sentinel mismatch: sent_2)" in done.stdout.splitlines()[0]
    assert ("new failing cases (not in the release, not known): ARGMAX(type=f32,ne=[32,513,1,1]), "
            "COUNT_EQUAL(type=f32,ne=[4,500,1,1]), COUNT_EQUAL(type=f32,ne=[4,5000,1,1])") in done.stdout
    assert f"| `{ARGMAX}` | sentinel mismatch\\: sent\\_2 | no |" in summary.read_text()  # each cell literal text

    # declared known, with a reason: a pass that keeps saying so
    toml = (root / "buildkit.toml").read_text()
    (root / "buildkit.toml").write_text(toml + '\n[gpu_check]\nknown_failures = ["ARGMAX: stray write, tracked", '
                                               '"COUNT_EQUAL: uses argmax"]\n')
    done = buildkit(root, env, "gpu-check", f"{IMAGE}:cpu-tests", "-b", "CPU", "--gpus", "none", "--compare",
                    str(release))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.startswith("gpu-check CPU: PASS 3/6 cases passed, 3 known: ")
    assert f"{ARGMAX} (stray write, tracked)" in done.stdout.splitlines()[0]


def test_build_tests_push_publishes_the_tests_image_by_digest_under_its_build_key_tag_unsigned(project, tmp_path,
                                                                                               registry_plain):
    """`build --tests --push` (issue 46): the tests image goes up after the image, under the build-key tag with
    -tests only (no release tag: it is not the release artifact), labelled with the image's digest and not
    signed (the image is); run again, the registry's build key is found and so is its tests image; a tests tag
    that names another image is replaced by the tests image built from the same context. (The project's build is
    this module's first test's: the compile comes from the layer cache.)"""
    from buildkit.release.signkeys import generate_keys
    from registryserver import head_digest, tag_digests

    root, env = project
    repo = "gpucheck/published"
    name = f"{registry_plain.host}/{repo}"
    generate_keys(tmp_path / "cosign.key", tmp_path / "cosign.pub")

    def push(*args: str) -> dict:
        done = buildkit(root, env, "build", "--tests", "--push", "--image", name, "--sign-key",
                        str(tmp_path / "cosign.key"), "--json", *args)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    try:
        first = push("--release", "0.1.0", "--no-verify")  # (the image is this module's first test's, verified)
        assert first["origin"] == "built" and first["tests"].startswith(f"{name}@sha256:")
        tests_digest = first["tests"].split("@")[1]
        tests_tag = f"bk-{first['build_key'][:24]}-cpu-tests"
        with RegistryClient(registry_plain.host) as client:
            tags = tag_digests(client, repo)
            labels = image_labels(client, repo, tests_digest)
        assert [t for t, d in tags.items() if d == tests_digest] == [tests_tag]  # no release tag on it
        assert {t for t, d in tags.items() if d == first["digest"]} == set(first["tags"])
        assert labels == {"org.llama-buildkit.tests-of": first["digest"]}  # none of buildkit's labels
        assert f"sha256-{first['digest'].split(':')[1]}.sig" in tags  # the image is signed, its tests image not
        assert f"sha256-{tests_digest.split(':')[1]}.sig" not in tags

        again = push()  # the registry has the build key, and its tests image
        assert (again["origin"], again["digest"], again["tests"]) == ("registry", first["digest"], first["tests"])

        with RegistryClient(registry_plain.host) as client:  # the tests tag moved to the image itself
            client.put_manifest(repo, tests_tag, *client.get_manifest(repo, first["digest"])[:2])
        rebuilt = push()
        assert (rebuilt["origin"], rebuilt["tests"]) == ("registry", first["tests"])  # the same bytes again
        with RegistryClient(registry_plain.host) as client:
            assert head_digest(client, repo, tests_tag) == tests_digest
    finally:
        remove_local_images(name)
