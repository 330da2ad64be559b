"""`buildkit nightly` and `buildkit promote` against real things: the example fork served by `git daemon`
over git://, the real engine (buildx bake, docker driver), and the CNCF registry on 127.0.0.1.

The matrix is cpu plus sm_120 (CUDA 13.1 from NVIDIA's PyPI wheels, without cuBLAS, on the local
Debian base image). The tests run in order and share one project, registry repository and fork:

1. first nightly: every variant built, verified and pushed;
2. no new commit: nothing built (a pass-through `docker` on PATH logs every call: no buildx at all);
   also without the lock (a fresh CI runner), from the registry's labels;
3. two new commits: both variants rebuilt; the changelog is exactly their subjects;
4. a commit the patch queue no longer applies to: the night fails naming the patch, nothing is
   built, every tag stays where it was;
5. a commit that breaks only the CUDA build: cpu is published, sm_120 fails and keeps its tags;
6. promote: release tags on a nightly's digest, nothing built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from buildkit.oci.registry import RegistryClient
from buildkit.release.cosignformat import tag_for as cosign_tag
from buildkit.release.signkeys import generate_keys
from test_signing_cosign import cosign
from forkrepo import FORK_EPOCH, make_fork_repo
from gitserver import commit_all
from images import remove_local_images
from registryserver import tag_digests

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-fork"
REAL_DOCKER = subprocess.run(["sh", "-c", "command -v docker"], capture_output=True, text=True).stdout.strip()
REPO = "nightly/tiny"
CUDA_VARIANT = "cuda13.1-sm120"
FORK_MD = "# Fork\n\nThis tree carries one commit on top of upstream (made by tests/forkrepo.py).\n"
PATCH = """--- a/FORK.md
+++ b/FORK.md
@@ -1,3 +1,4 @@
 # Fork

 This tree carries one commit on top of upstream (made by tests/forkrepo.py).
+Patched by the nightly's patch queue.
"""


@pytest.fixture(scope="module")
def night(tmp_path_factory, git_daemon, registry_plain, debian_base_image, docker_engine):
    tmp = tmp_path_factory.mktemp("nightly")
    fork = tmp / "upstream" / "tiny-fork"
    make_fork_repo(fork, EXAMPLE)
    project = tmp / "project"
    (project / "patches").mkdir(parents=True)
    (project / "patches" / "0001-fork-note.patch").write_text(PATCH)
    (project / "buildkit.toml").write_text(f"""schema_version = 1
[source]
url = "{git_daemon.url_for(fork)}"
branch = "master"
commit = ""
patch_dir = "patches"
[image]
name = "{registry_plain.host}/{REPO}"
default_variant = "cpu"
[build]
jobs = 2
progress = "plain"
[base]
provider = "wheels"
os_image = "{debian_base_image}"
cublas = false
[matrix]
archs = ["cpu", "sm_120"]
cuda_versions = ["13.1"]
targets = ["server"]
""")
    bindir = tmp / "spy-bin"
    bindir.mkdir()
    log = tmp / "docker-calls.log"
    (bindir / "docker").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {REAL_DOCKER} "$@"\n')
    (bindir / "docker").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_BUILDKIT_", "GITHUB_"))}
    env["PATH"] = f"{bindir}:{env['PATH']}"
    # this checkout's buildkit, whatever checkout the installed package points at (cliutil.buildkit_env's rule)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # one cache for every test of the session (the CUDA 13.1 wheels are downloaded once per cache)
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "buildkit-cache")
    env["GITHUB_STEP_SUMMARY"] = str(tmp / "step-summary.md")
    generate_keys(tmp / "cosign.key", tmp / "cosign.pub")  # sign.key_file, from its environment variable
    env["LLAMA_BUILDKIT_SIGN_KEY_FILE"] = str(tmp / "cosign.key")
    yield {"fork": fork, "project": project, "env": env, "log": log, "registry": registry_plain, "tmp": tmp,
           "epoch": FORK_EPOCH, "runs": {}}
    remove_local_images(f"{registry_plain.host}/{REPO}")


def buildkit(night, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    night["log"].write_text("")
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=night["project"],
                          env=env or night["env"], capture_output=True, text=True, timeout=1800)


def run_nightly(night, name: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = night["tmp"] / f"{name}.json"
    proc = buildkit(night, "nightly", "--summary", str(out), *args)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    night["runs"][name] = summary
    return proc, summary


def registry_tags(night) -> dict[str, str]:
    with RegistryClient(night["registry"].host) as client:
        return tag_digests(client, REPO)


def layers_by_step(night, digest: str) -> dict[str, str]:
    """{the step that made it: layer digest} of a pushed (single-platform) image."""
    with RegistryClient(night["registry"].host) as client:
        manifest = json.loads(client.get_manifest(REPO, digest)[0])
        config = json.loads(client.get_blob(REPO, manifest["config"]["digest"]))
    steps = [h.get("created_by", "") for h in config["history"] if not h.get("empty_layer")]
    assert len(steps) == len(manifest["layers"])
    return {step: layer["digest"] for step, layer in zip(steps, manifest["layers"], strict=False)}


def new_commit(night, message: str, files: dict[str, str]) -> str:
    night["epoch"] += 86400
    for rel, text in files.items():
        (night["fork"] / rel).write_text(text)
    return commit_all(night["fork"], message, night["epoch"])


def by_variant(summary: dict) -> dict[str, dict]:
    return {v["variant"]: v for v in summary["variants"]}


def docker_calls(night) -> str:
    return night["log"].read_text()


def builds_run(night) -> list[str]:
    """The buildx builds and bakes among the docker calls (`buildx inspect`, asked of the builder while
    base images are resolved, builds nothing)."""
    return [c for c in docker_calls(night).splitlines() if c.startswith(("buildx build", "buildx bake"))]


def test_first_nightly_builds_and_pushes_every_variant(night):
    proc, summary = run_nightly(night, "first")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    head = subprocess.run(["git", "-C", str(night["fork"]), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert summary["ok"] and not summary["up_to_date"] and summary["new_commit"] == head
    assert summary["old_commit"] is None
    version = summary["version"]
    assert version.startswith("0.1.0-nightly.") and len(version.split(".")[3]) == 8  # <next patch>-nightly.<date>
    variants = by_variant(summary)
    assert set(variants) == {"cpu", CUDA_VARIANT}
    tags = registry_tags(night)
    for key, result in variants.items():
        assert result["status"] == "passed" and not result["skipped"]
        assert result["digest"].startswith("sha256:") and result["build_seconds"] > 0
        assert result["tags"] == [f"{version}-{key}", f"nightly-{key}"]
        assert tags[f"nightly-{key}"] == tags[f"{version}-{key}"] == result["digest"]
        assert all(c["status"] != "failed" for c in result["checks"])
    assert any(c["name"] == "cuda-archs" and c["status"] == "passed" for c in variants[CUDA_VARIANT]["checks"])
    assert "latest" not in tags  # a prerelease never gets latest
    calls = docker_calls(night)
    # the matrix is one bake; a `buildx build` only exports each build stage's package list (cached, no compile)
    # or, for the CUDA variant, makes its tests image from the same build stage (issue 46 item 1)
    builds = [c for c in calls.splitlines() if c.startswith("buildx build")]
    assert "buildx bake" in calls and all("--target build-packages" in c or "--target tests" in c for c in builds)
    assert sum("--target tests" in c for c in builds) == 1, builds  # the CUDA variant's, not the cpu one's
    lock = json.loads((night["project"] / "buildkit.lock").read_text())
    assert lock["nightly"]["variants"]["cpu"]["commit"] == head
    assert lock["builds"][f"{CUDA_VARIANT}/server"]["image_digest"] == variants[CUDA_VARIANT]["digest"]
    assert lock["builds"]["cpu/server"]["version"] == version
    markdown = Path(night["env"]["GITHUB_STEP_SUMMARY"]).read_text()
    assert "| `cpu` | passed" in markdown and head in markdown
    # signed with sign.key_file as it was published: cosign itself verifies the digest, its provenance, its SBOM
    for key, result in variants.items():
        ref = f"{night['registry'].host}/{REPO}@{result['digest']}"
        for args in (("verify",), ("verify-attestation", "--type", "slsaprovenance1"),
                     ("verify-attestation", "--type", "cyclonedx")):
            done = cosign(night["tmp"], *args, "--key", str(night["tmp"] / "cosign.pub"), ref)
            assert done.returncode == 0, (key, args, done.stderr[-2000:])
        assert tags[cosign_tag(result["digest"], "sig")] and tags[cosign_tag(result["digest"], "att")]


def test_second_nightly_without_a_new_commit_builds_nothing(night):
    before = registry_tags(night)
    proc, summary = run_nightly(night, "second")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "up to date" in proc.stdout
    assert summary["up_to_date"] and summary["ok"]
    assert all(v["skipped"] and v["status"] == "skipped" for v in summary["variants"])
    assert {v["known_from"] for v in summary["variants"]} == {"lock"}
    assert docker_calls(night) == ""  # the docker CLI is not run at all: no buildx, no push, no inspect
    assert registry_tags(night) == before
    # a fresh CI runner has no lock: the registry's image labels say what was built
    proc, summary = run_nightly(night, "second-nolock", "--lock", str(night["tmp"] / "absent.lock"))
    assert proc.returncode == 0 and summary["up_to_date"], proc.stderr[-3000:]
    assert {v["known_from"] for v in summary["variants"]} == {"registry"}
    assert docker_calls(night) == ""


def test_a_nightly_tag_pointed_at_another_image_is_built_anew_not_trusted(night):
    """Issue 48: someone with push rights points nightly-cpu at another image carrying the same labels (the
    nightly's image plus one layer). Its labels say it is current; with the signing key the nightly finds it
    unsigned, says so, and builds cpu anew: nightly-cpu names a signed image of ours again, the other image
    is neither signed nor recorded, and the variant that was not touched is not built."""
    from test_publish_ownership import one_layer_more

    second = night["runs"]["second"]
    skipped = {v["variant"]: v["digest"] for v in second["variants"]}
    with RegistryClient(night["registry"].host) as client:
        version = json.loads(client.get_blob(REPO, json.loads(client.get_manifest(REPO, skipped["cpu"])[0])[
            "config"]["digest"]))["config"]["Labels"]["org.opencontainers.image.version"]
        evil = one_layer_more(client, REPO, skipped["cpu"], version)
        body, media_type, _ = client.get_manifest(REPO, evil)
        client.put_manifest(REPO, "nightly-cpu", body, media_type)
    proc, summary = run_nightly(night, "tampered")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    variants = by_variant(summary)
    assert variants[CUDA_VARIANT]["skipped"] and variants[CUDA_VARIANT]["digest"] == skipped[CUDA_VARIANT]
    cpu = variants["cpu"]
    assert cpu["status"] == "passed" and not cpu["skipped"], cpu
    assert "which this project did not publish" in cpu["reason"] and "no signature of" in cpu["reason"], cpu
    assert cpu["previous_commit"] is None  # the other image's labels are not taken for ours
    tags = registry_tags(night)
    assert tags["nightly-cpu"] == cpu["digest"] != evil
    assert cosign_tag(evil, "sig") not in tags and cosign_tag(evil, "att") not in tags
    done = cosign(night["tmp"], "verify", "--key", str(night["tmp"] / "cosign.pub"),
                  f"{night['registry'].host}/{REPO}:nightly-cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    assert evil not in (night["project"] / "buildkit.lock").read_text()


def test_new_commits_are_rebuilt_with_their_changelog(night):
    before = registry_tags(night)
    first = night["runs"]["first"]
    one = new_commit(night, "feat: a faster kernel", {"NEWS.md": "faster\n"})
    two = new_commit(night, "fix: the kernel's typo", {"NEWS.md": "faster, fixed\n"})
    proc, summary = run_nightly(night, "third")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert summary["old_commit"] == first["new_commit"] and summary["new_commit"] == two
    assert [c["subject"] for c in summary["changelog"]["commits"]] == ["fix: the kernel's typo",
                                                                       "feat: a faster kernel"]
    assert [c["sha"] for c in summary["changelog"]["commits"]] == [two, one]
    assert summary["version"] != first["version"]
    after = registry_tags(night)
    for key, result in by_variant(summary).items():
        assert result["status"] == "passed" and result["previous_commit"] == first["new_commit"]
        assert after[f"nightly-{key}"] == result["digest"] != before[f"nightly-{key}"]
        assert after[f"{first['version']}-{key}"] == before[f"{first['version']}-{key}"]  # immutable tags stay
        # the commit changed no backend: their layers are the previous image's, the rest of /app/lib's is not
        old, new = layers_by_step(night, before[f"nightly-{key}"]), layers_by_step(night, result["digest"])
        backends = [s for s in new if s.startswith("COPY --chown=0:0 /app/libs/")]
        assert backends and all(new[s] == old[s] for s in backends), (old, new)
        rest = "COPY --chown=0:0 /app/lib/ /app/lib/ # buildkit"
        assert new[rest] != old[rest]
        # only the layers whose files changed differ: the rest of /app/lib (libllama's build info names the
        # commit). The server program's layer and the runtime packages' keep their digests although the
        # commit's time (the epoch rewrite-timestamp lowers later times to) moved by days, and no file differs
        # in its metadata alone (issue 41: /app's time in the server's layer, the packages' own times in theirs)
        assert {s for s in new if new[s] != old.get(s)} == {rest}, (old, new)
        diff = buildkit(night, "diff", "--json", f"{night['registry'].host}/{REPO}@{before[f'nightly-{key}']}",
                        f"{night['registry'].host}/{REPO}@{result['digest']}")
        assert diff.returncode == 2, diff.stderr[-3000:]  # 2: the images differ
        changes = [f for layer in json.loads(diff.stdout)["layers"] for f in layer.get("files", [])]
        assert changes and not [f for f in changes if f["change"] == "metadata"], changes
    assert "fix: the kernel's typo" in proc.stdout


def test_a_patch_that_stops_applying_fails_only_that_night(night):
    before = registry_tags(night)
    lock_before = (night["project"] / "buildkit.lock").read_text()
    new_commit(night, "docs: reword FORK.md", {"FORK.md": FORK_MD.replace("one commit", "some commits")})
    proc, summary = run_nightly(night, "patch-broken")
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "0001-fork-note.patch" in errors[0] and "FORK.md" in errors[0]
    assert not summary["ok"] and "0001-fork-note.patch" in summary["error"]
    assert all(v["status"] == "failed" for v in summary["variants"])
    assert not builds_run(night), docker_calls(night)
    assert registry_tags(night) == before
    assert (night["project"] / "buildkit.lock").read_text() == lock_before


def test_a_failing_variant_does_not_block_the_others(night):
    before = registry_tags(night)
    third = night["runs"]["third"]
    cuda_source = night["fork"] / "ggml" / "src" / "ggml-cuda" / "ggml-cuda.cu"
    new_commit(night, "cuda: this commit breaks the CUDA build",
               {"FORK.md": FORK_MD, cuda_source.relative_to(night["fork"]).as_posix():
                cuda_source.read_text() + '\n#error "broken on purpose by the nightly tests"\n'})
    proc, summary = run_nightly(night, "one-fails")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    variants = by_variant(summary)
    assert variants["cpu"]["status"] == "passed"
    assert variants[CUDA_VARIANT]["status"] == "failed"
    assert "broken on purpose" in variants[CUDA_VARIANT]["error"] or "build failed" in variants[CUDA_VARIANT]["error"]
    assert [c["subject"] for c in summary["changelog"]["commits"]] == [
        "cuda: this commit breaks the CUDA build", "docs: reword FORK.md"]
    after = registry_tags(night)
    assert after["nightly-cpu"] == variants["cpu"]["digest"] != before["nightly-cpu"]
    cuda_tag = f"nightly-{CUDA_VARIANT}"
    assert after[cuda_tag] == before[cuda_tag] == by_variant(third)[CUDA_VARIANT]["digest"]
    assert f"{summary['version']}-{CUDA_VARIANT}" not in after
    assert "| `cuda13.1-sm120` | failed" in Path(night["env"]["GITHUB_STEP_SUMMARY"]).read_text()
    # the next night retries only the variant that is behind
    lock = json.loads((night["project"] / "buildkit.lock").read_text())
    assert lock["nightly"]["variants"][CUDA_VARIANT]["commit"] == third["new_commit"]
    assert lock["nightly"]["variants"]["cpu"]["commit"] == summary["new_commit"]


def test_promote_gives_a_nightly_release_tags_without_building(night):
    before = registry_tags(night)
    proc = buildkit(night, "promote", "nightly-cpu", "--release", "1.0.0")
    assert proc.returncode == 0, proc.stderr
    after = registry_tags(night)
    digest = before["nightly-cpu"]
    for tag in ("1.0.0-cpu", "1.0-cpu", "1-cpu", "cpu", "1.0.0", "1.0", "1", "latest"):
        assert after[tag] == digest, tag
    assert {t: d for t, d in after.items() if t in before} == before  # nothing else moved
    assert "buildx" not in docker_calls(night) and "push" not in docker_calls(night).split()
    again = buildkit(night, "promote", "nightly-cpu", "--release", "1.0.0")
    assert again.returncode == 0 and "changed: nothing" in again.stdout
    other = buildkit(night, "promote", f"nightly-{CUDA_VARIANT}", "--release", "1.0.0")
    assert other.returncode == 0, other.stderr  # other variant: its own tags (1.0.0-cuda..., no bare 1.0.0)
    assert registry_tags(night)["1.0.0"] == digest
    # the nightly's signature signs the digest, not a tag: under its release tag it verifies as it did
    done = cosign(night["tmp"], "verify", "--key", str(night["tmp"] / "cosign.pub"),
                  f"{night['registry'].host}/{REPO}:1.0.0")
    assert done.returncode == 0, done.stderr[-2000:]
    bad = buildkit(night, "promote", "cpu", "--release", "1.0.1")
    assert bad.returncode == 1 and bad.stderr.startswith("error:") and "nightly-<variant>" in bad.stderr
