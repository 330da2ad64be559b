"""Reproducible builds on the real engine: the example fork's cpu variant, built, then rebuilt from a clean state.

The first build goes through `buildkit.flows.unit.buildunit.build(..., no_cache=True)` (buildx --no-cache;
its compile reads nothing from the ccache). A later commit, dated after it, is
built with the cache (its runtime packages come from the first build's cached step, made before that
commit) and `buildkit reproduce` of its lock rebuilds it cache-less, compiling every object again (no
ccache hit): both must give the same manifest digest. The CUDA variant is built without the ccache, the
other way a record can be. A changed patch, a changed template and a different commit each give another
digest, and `diff` / `reproduce` name the files that differ.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
from datetime import datetime, UTC
from pathlib import Path
from unittest import mock

import docker
import pytest

from buildkit.flows.unit.buildunit import UnitResult
from buildkit.core.progress import ccache_stats
from forkrepo import _git, make_fork_repo
from cliutil import buildkit_env, write_project
from fixtures_docker import need_containerd_store

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
IMAGE = f"buildkit-test/repro-{uuid.uuid4().hex[:8]}"  # unique: other runs may share the engine
PATCH = """--- a/common/common.cpp
+++ b/common/common.cpp
@@ -1,3 +1,4 @@
+int buildkit_patched_by_tests = 1;
 #include "common.h"

 #include "build-info.h"
"""



def digest_of(unit: UnitResult) -> str:
    """The digest of a build that succeeded (buildunit.build raises when it does not)."""
    assert unit.result is not None
    return unit.result.digest

def buildkit(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repro-upstream") / "tiny-fork"
    _, commit = make_fork_repo(repo, ROOT / "examples" / "tiny-fork")
    return {"path": repo, "commit": commit}


def later_commit(repo: Path) -> str:
    """A second fork commit that changes a compiled source file, dated now: after the first build, whose
    cached steps (the runtime packages) the next build of the project reuses, as a new upstream commit is
    after yesterday's build."""
    source = repo / "common" / "common.cpp"
    source.write_text(source.read_text() + "\n// a later fork commit\nint buildkit_later_commit = 1;\n")
    now = datetime.now(UTC).replace(microsecond=0).isoformat()
    _git(repo, "commit", "-q", "-a", "-m", "fork: later", date=now)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module", autouse=True)
def remove_images():
    yield
    try:
        client = docker.from_env()
        images = client.images.list()
    except Exception:
        return
    for image in images:
        for tag in image.tags or ():
            if tag.startswith(IMAGE):
                try:
                    client.images.remove(tag, noprune=False)
                except docker.errors.APIError:
                    pass


@pytest.fixture(scope="module")
def project(tmp_path_factory, fork, debian_base_image, docker_engine):
    need_containerd_store()
    root = tmp_path_factory.mktemp("repro-project")
    write_project(root,
                  source={"url": fork['path'], "commit": fork['commit'], "patch_dir": "patches"},
                  image={"name": IMAGE, "version": "0.3.0"},
                  build={"arch": "cpu", "jobs": 2, "progress": "plain"},  # ccache on: the default
                  base={"os_image": debian_base_image})
    env = buildkit_env()
    env["LLAMA_BUILDKIT_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "repro-cache")
    return {"root": root, "env": env}


def config(project, **overrides):
    from buildkit.plan.config import load_config

    overrides = {"cache.dir": project["env"]["LLAMA_BUILDKIT_CACHE_DIR"], **overrides}
    return load_config(project["root"] / "buildkit.toml", env=project["env"],
                       overrides={k: (v, "test") for k, v in overrides.items()})


def build(cfg, engine, **kwargs):
    """buildunit.build of cfg's unit (cli.unitspecs.unit_spec resolves it)."""
    from buildkit.flows.unit import buildunit
    from buildkit.cli.unitspecs import unit_spec

    return buildunit.build(unit_spec(cfg, engine), engine, **kwargs)


def clean_build(project, **overrides):
    """buildkit build with buildx --no-cache: every object compiled again, into the clean builds' own
    ccache mount."""
    from buildkit.engine.current import get_engine

    return build(config(project, **overrides), get_engine(), no_cache=True)


@pytest.fixture(scope="module")
def first(project):
    built = clean_build(project)
    lock = json.loads((project["root"] / "buildkit.lock").read_text())["builds"]["cpu/server"]
    shutil.copy(project["root"] / "buildkit.lock", project["root"] / "first.lock")
    return {"built": built, "lock": lock}


def test_the_first_build_is_recorded_for_reproduction(first, project):
    lock, built = first["lock"], first["built"]
    assert lock["exporter"] == "oci" and lock["image_digest"] == built.result.digest
    # the engine's image is the archive, byte for byte: its id is the manifest digest
    assert docker.from_env().images.get(f"{IMAGE}:cpu").id == lock["image_digest"] == lock["image_id"]
    inputs = json.loads(lock["labels"]["org.llama-buildkit.inputs"])
    assert inputs["ccache"] is True and inputs["base_images"][0][1] == lock["base_images"][0]["digest"]
    # the image carries the labels of issue 24: its description and URL, its runtime base and that digest
    labels = docker.from_env().images.get(f"{IMAGE}:cpu").labels
    oci = "org.opencontainers.image."
    assert labels[oci + "base.name"] == lock["base_images"][0]["ref"]
    assert labels[oci + "base.digest"] == lock["base_images"][0]["digest"]
    assert labels[oci + "url"] == lock["source_url"] and "for cpu" in labels[oci + "description"]
    assert labels == lock["labels"]


def test_render_pins_the_base_image_by_digest(project, first, tmp_path):
    """The engine-only base reaches the build by content: on the engine's own builder the FROM lines
    name it by the recorded digest in the engine, and no layout context is passed."""
    proc = buildkit(project["root"], project["env"], "render", "--out", str(tmp_path / "ctx"))
    assert proc.returncode == 0, proc.stderr
    digest = first["lock"]["base_images"][0]["digest"]
    name = "127.0.0.1:1/llama-buildkit/base:" + digest.removeprefix("sha256:")
    text = (tmp_path / "ctx" / "Dockerfile").read_text()
    assert f"FROM {name} AS build" in text and f"FROM {name} AS base" in text
    assert "oci-layout://" not in proc.stdout


def ccache_mounts() -> dict[str, str]:
    """The engine's ccache mounts: their id -> BuildKit's record id (a mount emptied is a new record)."""
    out = subprocess.run(["docker", "buildx", "du", "--verbose", "--filter", "type=exec.cachemount"],
                         capture_output=True, text=True, check=True).stdout
    mounts = {}
    for record in out.split("\n\n"):
        fields = dict(re.findall(r"^(ID|Description):\s+(.*)$", record, re.M))
        named = re.search(r'with id "/?(llama-buildkit-ccache-[^"]+)"', fields.get("Description", ""))
        if named:
            mounts[named.group(1)] = fields["ID"]
    return mounts


def test_reproduce_from_the_lock_gives_the_same_digest(project, first, variants):
    """The later commit's build, whose runtime-package layer came from the cache of the first build (made
    before that commit): every file time in the image is the commit's or a fixed one, never the time a
    cached step ran, so the cache-less rebuild gives the same digest. The rebuild compiles into a ccache
    mount of its own: BuildKit's --no-cache empties the mount it is given, and the warm one stays."""
    recorded = variants["commit lock"].read_text()
    digest = json.loads(recorded)["builds"]["cpu/server"]["image_digest"]
    warm = ccache_mounts()["llama-buildkit-ccache-cpu-amd64"]
    proc = buildkit(project["root"], project["env"], "reproduce", str(variants["commit lock"]))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "reproduced" in proc.stdout and digest in proc.stdout
    # the recorded build was a warm one: the rebuild's own clean ccache mount is no Dockerfile difference
    assert "rendered Dockerfile differs" not in proc.stderr, proc.stderr[-3000:]
    # the recorded build used the ccache: the rebuild compiled every object again (CCACHE_RECACHE),
    # none was looked up (recached calls count as uncacheable), so the proof does not rest on the cache
    assert ccache_stats(proc.stderr.splitlines()) == (0, 0), proc.stderr[-3000:]
    assert re.search(r"^#\d+ [\d.]+\s+Cacheable calls:\s+0 /\s+[1-9]", proc.stderr, re.M), proc.stderr[-3000:]
    assert "--no-cache" not in proc.stdout  # buildx output goes to stderr
    # the reproduction changed nothing: same lock, the warm ccache mount as it was
    assert variants["commit lock"].read_text() == recorded
    # (whether the clean mount is listed is BuildKit's business: another reproduce beside this one, in the
    # engine tier's other worker, empties and re-makes that same mount, and `buildx du` then misses it)
    assert ccache_mounts()["llama-buildkit-ccache-cpu-amd64"] == warm


def test_reproduce_from_the_image_labels(project, first):
    proc = buildkit(project["root"], project["env"], "reproduce", f"{IMAGE}:cpu", "--cache", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["reproduced"] and data["rebuilt"] == first["lock"]["image_digest"]


def test_a_missing_or_mismatching_input_is_an_error(project, first, tmp_path):
    other = tmp_path / "patches"
    other.mkdir()
    (other / "0001-x.patch").write_text(PATCH)
    proc = buildkit(project["root"], project["env"], "reproduce", "first.lock", "--patches", str(other))
    assert proc.returncode == 1 and "the patch set in" in proc.stderr and "0001-x.patch" in proc.stderr
    lock = json.loads((project["root"] / "first.lock").read_text())
    entry = lock["builds"]["cpu/server"]
    entry["base_images"][0]["digest"] = ""
    (tmp_path / "nobase.lock").write_text(json.dumps(lock))
    proc = buildkit(project["root"], project["env"], "reproduce", str(tmp_path / "nobase.lock"))
    assert proc.returncode == 1 and "without a digest" in proc.stderr
    lock["builds"]["cpu/server"] = dict(entry, tool_version="0.0.0-other", base_images=first["lock"]["base_images"],
                                        template_sha256="0" * 64)
    (tmp_path / "tmpl.lock").write_text(json.dumps(lock))
    proc = buildkit(project["root"], project["env"], "reproduce", str(tmp_path / "tmpl.lock"))
    assert proc.returncode == 1 and "warning: the build was recorded by buildkit 0.0.0-other" in proc.stderr
    assert "the templates here hash to" in proc.stderr


@pytest.fixture(scope="module")
def variants(project, first, fork, tmp_path_factory):
    """The same build with one input changed each: a patch, a template, the commit (cache allowed)."""
    from buildkit.engine.current import get_engine

    out = {}
    templates = tmp_path_factory.mktemp("templates")
    patch = project["root"] / "patches" / "0001-code.patch"
    patch.write_text(PATCH)
    try:
        out["patch"] = digest_of(build(config(project, **{"image.name": IMAGE + "-patch",
                                                          "lock.path": str(templates / "lock0")}), get_engine()))
    finally:
        patch.unlink()
    for path in (ROOT / "templates").glob("*.j2"):
        shutil.copy(path, templates / path.name)
    runtime = templates / "_runtime.j2"
    runtime.write_text(runtime.read_text().replace(
        "ENV LD_LIBRARY_PATH=",
        "RUN mkdir -p /etc/llama && echo changed-template > /etc/llama/template\nENV LD_LIBRARY_PATH=", 1))
    import buildkit.plan.render as render

    with mock.patch.object(render, "templates_dir", lambda: templates):  # the name render reads (core/paths.py's)
        out["template"] = digest_of(build(config(project, **{"image.name": IMAGE + "-template",
                                                             "lock.path": str(templates / "lock")}), get_engine()))
    later = later_commit(fork["path"])
    out["commit"] = digest_of(build(config(project, **{"image.name": IMAGE + "-commit", "source.commit": later,
                                                        "lock.path": str(templates / "lock2")}), get_engine()))
    out["commit lock"] = templates / "lock2"
    return out


def diff(project, a: str, b: str) -> subprocess.CompletedProcess:
    return buildkit(project["root"], project["env"], "diff", a, b)


def test_a_changed_patch_template_or_commit_changes_the_digest_and_diff_names_the_files(project, first, variants):
    base = first["lock"]["image_digest"]
    assert len({base, variants["patch"], variants["template"], variants["commit"]}) == 4, variants
    patched = diff(project, f"{IMAGE}:cpu", f"{IMAGE}-patch:cpu")
    assert patched.returncode == 2 and "/app/lib/libllama-common.so" in patched.stdout, patched.stdout[-3000:]
    template = diff(project, f"{IMAGE}:cpu", f"{IMAGE}-template:cpu")
    assert template.returncode == 2 and "added    /etc/llama/template" in template.stdout, template.stdout[-3000:]
    commit = diff(project, f"{IMAGE}:cpu", f"{IMAGE}-commit:cpu")
    assert commit.returncode == 2 and "/app/lib/libllama-common.so" in commit.stdout
    assert "org.opencontainers.image.revision" in commit.stdout  # the revision label says why


def test_reproduce_that_differs_reports_the_layers_and_files(project, first, variants, tmp_path):
    """A record whose image is not what its inputs give (here: the patched image recorded under the
    unpatched inputs) is not reproduced: exit 2, with the differing files."""
    lock = json.loads((project["root"] / "first.lock").read_text())
    patched = docker.from_env().images.get(f"{IMAGE}-patch:cpu").id
    lock["builds"]["cpu/server"].update(image_digest=patched, image_id=patched)
    (tmp_path / "wrong.lock").write_text(json.dumps(lock))
    proc = buildkit(project["root"], project["env"], "reproduce", str(tmp_path / "wrong.lock"), "--cache")
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "NOT reproduced" in proc.stdout and "content  /app/lib/libllama-common.so" in proc.stdout
    assert "ELF sections differ" in proc.stdout


def send_cuda_runtime(runtime: Path, change: str, tmp_path: Path, env: dict[str, str]) -> None:
    """A build that sends a named context cuda-runtime: the runtime libraries with lib64/ changed.

    BuildKit keeps its transfer of a context under the context's name and the main context's folder
    name (buildx 0.13; every buildkit build's is context/), and compares a folder's mode but not its
    times: after lib64/ was sent with another mode ("mode"), the next build's transfer sets the folder's
    metadata, its time included, from what it sends; after lib64/ was sent with one entry fewer
    ("fewer"), the next build's transfer adds the entry and the folder gets the time of that, now."""
    folder = tmp_path / f"cuda-runtime-{change}"
    shutil.copytree(runtime, folder, symlinks=True)
    if change == "mode":
        (folder / "lib64").chmod(0o700)
    else:
        max((folder / "lib64").iterdir()).unlink()
    (tmp_path / "context").mkdir(exist_ok=True)
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY --from=cuda-runtime /lib64/ /lib64/\n")
    subprocess.run(["docker", "buildx", "build", "-q", "--no-cache", "-f", str(tmp_path / "Dockerfile"),
                    "--build-context", f"cuda-runtime={folder}", "--output", f"type=local,dest={tmp_path / 'out'}",
                    str(tmp_path / "context")], env=env, check=True, capture_output=True, timeout=300)


def test_the_cuda_variant_is_reproduced_bit_for_bit(project, tmp_path_factory, tmp_path):
    """sm_120 with the PyPI-wheel toolkit: nvcc's temporary file names (tmpxft_<pid>_...) would differ
    between two clean builds; the template strips that symbol, so the digests are the same.

    Before the build and before the reproduction another build sends a cuda-runtime context (as a build
    from a user's own CUDA root, or a cross build's, would): the image's /usr/local/cuda/lib64 must not
    take its time from what the engine kept of those transfers."""
    from buildkit.engine.current import get_engine
    from buildkit.cli.unitspecs import cache_root
    from buildkit.source.cudaroot import ensure_cuda_root, runtime_subset

    cache = str(tmp_path_factory.getbasetemp() / "buildkit-cache")  # shared with test_build_docker's CUDA root
    lock = tmp_path / "cuda.lock"
    cfg = config(project, **{"build.arch": "sm_120", "build.cuda_version": "13.1", "base.provider": "wheels",
                             "base.cublas": False, "build.ccache": False, "cache.dir": cache, "lock.path": str(lock),
                             "image.name": IMAGE + "-cuda"})
    runtime = runtime_subset(ensure_cuda_root("13.1", cache_root(cfg), with_cublas=False))  # the build's, reused
    send_cuda_runtime(runtime, "mode", tmp_path, project["env"])  # the build's lib64/: the root's own time
    built = build(cfg, get_engine(), no_cache=True)
    send_cuda_runtime(runtime, "fewer", tmp_path, project["env"])  # the reproduction's lib64/: now
    env = dict(project["env"], LLAMA_BUILDKIT_CACHE_DIR=cache)
    proc = buildkit(project["root"], env, "reproduce", str(lock))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert "reproduced" in proc.stdout and digest_of(built) in proc.stdout

