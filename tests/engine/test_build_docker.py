"""`buildkit build` end to end on the real engine, with the bundled example fork served over git://.

The fork is examples/tiny-fork (a small CMake project shaped like llama.cpp, with a real CUDA
source behind GGML_CUDA) committed as "upstream" plus one fork commit. CUDA variants use the
PyPI-wheel CUDA provider on a debootstrapped Debian base, so nothing is pulled from a registry.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from buildkit.source.cudaroot import cuda_root_dir
from buildkit.verify.checks import elf_archs, find_cuobjdump
from forkrepo import FORK_EPOCH, make_fork_repo
from cliutil import cli_env, write_project
from pyindexserver import ProxyIndex, proxy_env, proxy_store

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-fork"
CUDA = "13.1"


def buildkit(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess; output captured."""
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def fork(tmp_path_factory, git_daemon):
    repo = tmp_path_factory.mktemp("upstream") / "tiny-fork"
    upstream, fork_sha = make_fork_repo(repo, EXAMPLE)
    return {"url": git_daemon.url_for(repo), "commit": fork_sha, "upstream": upstream, "path": repo}


@pytest.fixture(scope="module")
def pypi():
    """NVIDIA's wheels through a loopback index in front of PyPI, its files kept between runs (issue 41)."""
    with ProxyIndex(proxy_store()) as index:
        yield index


@pytest.fixture(scope="module")
def project(tmp_path_factory, fork, debian_base_image, docker_engine, pypi):
    """A project folder with its buildkit.toml pointing at the served fork, and a private cache."""
    root = tmp_path_factory.mktemp("project")
    write_project(root,
                  source={"url": fork['url'], "commit": fork['commit'], "patch_dir": "patches"},
                  image={"name": "buildkit-test/tiny-fork", "version": "0.2.0"},
                  build={"cuda_version": CUDA, "jobs": 2},
                  base={"provider": "wheels", "os_image": debian_base_image, "cublas": False})
    env = cli_env(tmp_path_factory.getbasetemp() / "buildkit-cache", **proxy_env(pypi))  # this checkout's buildkit
    env["LLAMA_BUILDKIT_BUILD_PROGRESS"] = "plain"
    return {"root": root, "env": env, "cache": Path(env["LLAMA_BUILDKIT_CACHE_DIR"]), "os_image": debian_base_image}


@pytest.fixture(scope="module")
def vmm_build(project):
    """An sm_120 image built with VMM on: its libggml-cuda needs the driver's libcuda.so.1."""
    return build(project, "--arch", "sm_120", "--vmm", "--tag", "vmm")


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def lock_entries(project) -> dict:
    path = project["root"] / "buildkit.lock"
    return json.loads(path.read_text())["builds"] if path.exists() else {}


def build(project, *args):
    proc = buildkit("build", *args, cwd=project["root"], env=project["env"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def image_labels(client, ref: str) -> dict:
    return client.images.get(ref).attrs["Config"]["Labels"]


def run_version(client, ref: str) -> str:
    out = client.containers.run(ref, ["--version"], remove=True, stdout=True, stderr=True)
    return out.decode()


def test_cpu_build(project, fork, client):
    proc = build(project, "--arch", "cpu")
    ref = "buildkit-test/tiny-fork:cpu"
    assert "verify version: passed" in proc.stdout
    # the runtime image prints the pinned fork commit (passed to CMake, .git is not in the context)
    assert fork["commit"] in run_version(client, ref)
    labels = image_labels(client, ref)
    assert labels["org.opencontainers.image.revision"] == fork["commit"]
    assert labels["org.opencontainers.image.source"] == fork["url"]
    assert labels["org.opencontainers.image.version"] == "0.2.0"
    assert labels["org.opencontainers.image.created"] == "2024-01-02T00:00:00Z"
    assert labels["org.llama-buildkit.arch"] == "cpu"
    entry = lock_entries(project)["cpu/server"]
    assert entry["commit"] == fork["commit"]
    assert entry["source_date_epoch"] == FORK_EPOCH
    assert entry["build_number"] == 2
    assert entry["template_sha256"] == labels["org.llama-buildkit.template"]
    assert entry["patch_set_sha256"] == labels["org.llama-buildkit.patch-set"]
    assert entry["image_digest"].startswith("sha256:")
    assert entry["base_images"][0]["ref"] == project["os_image"]
    assert entry["base_images"][0]["digest"].startswith("sha256:")
    assert ref in entry["tags"] and f"buildkit-test/tiny-fork:sha-{fork['commit'][:7]}-cpu" in entry["tags"]
    assert client.images.get(ref).id == entry["image_id"]


def test_build_user_runs_the_image_as_that_user_with_a_home(project, fork, client):
    """build.user: the server, and anything run in the image, is not root; $HOME is its own and writable.
    Shares the cpu build's compile (only the runtime stage differs); an image name and lock of its own, so
    that the :cpu tag and the lock's cpu entry stay the root image the other tests use."""
    build(project, "--arch", "cpu", "--set", "build.user=llama", "--set", "image.name=buildkit-test/tiny-fork-user",
          "--set", "lock.path=user.lock")
    ref = "buildkit-test/tiny-fork-user:cpu"
    assert client.images.get(ref).attrs["Config"]["User"] == "10001:10001"
    out = client.containers.run(ref, ["-c", 'id && touch "$HOME/written" && echo "home=$HOME"'],
                                entrypoint=["/bin/sh"], remove=True, stdout=True, stderr=True).decode()
    assert "uid=10001(llama) gid=10001(llama)" in out and "home=/home/llama" in out, out
    assert fork["commit"] in run_version(client, ref)  # llama-server itself runs as the user


# sm_120 with CUDA 13.5, a release newer than buildkit's built-in list: accepted because the index has it
@pytest.mark.parametrize("arch,elf,cuda", [("sm_120", "sm_120a", "13.5"), ("sm_89", "sm_89", CUDA)])
def test_cuda_build_contains_exactly_the_requested_arch(project, fork, client, pypi, arch, elf, cuda, tmp_path):
    fresh = not (cuda_root_dir(cuda, project["cache"], with_cublas=False) / ".buildkit-complete").exists()
    # the wheels another test of this worker (the cross build's, say) already put in the shared cache
    wheel_cache = project["cache"] / "cuda-wheels"
    cached = {p.name for p in wheel_cache.rglob("*.whl")} if wheel_cache.is_dir() else set()
    printed = buildkit("build", "--arch", arch, "--cuda", cuda, "--print", "--json", cwd=project["root"],
                       env=project["env"])
    assert printed.returncode == 0, printed.stderr
    after_print = dict(pypi.requests)
    proc = build(project, "--arch", arch, "--cuda", cuda)
    variant = f"cuda{cuda}-sm{arch[3:]}"
    ref = f"buildkit-test/tiny-fork:{variant}"
    assert "verify cuda-archs: passed" in proc.stdout and "verify no-vmm: passed" in proc.stdout
    # Independently of buildkit's own check: copy the library out and list its ELF images.
    container = client.containers.create(ref)
    try:
        stream, _ = container.get_archive("/app/lib")
        tar = tmp_path / "lib.tar"
        tar.write_bytes(b"".join(stream))
    finally:
        container.remove()
    subprocess.run(["tar", "-xf", str(tar), "-C", str(tmp_path)], check=True)
    library = next(p for p in (tmp_path / "lib").glob("libggml-cuda.so*") if not p.is_symlink())
    root = cuda_root_dir(cuda, project["cache"], with_cublas=False)
    cuobjdump = find_cuobjdump([root])
    assert cuobjdump is not None, root
    assert elf_archs(cuobjdump, library) == {elf}
    assert fork["commit"] in run_version(client, ref)
    labels = image_labels(client, ref)
    assert labels["org.llama-buildkit.cuda-version"] == cuda
    assert "-DGGML_CUDA_NO_VMM=ON" in labels["org.llama-buildkit.flags"]
    entry = lock_entries(project)[f"{variant}/server"]
    assert entry["arch"] == arch and entry["cuda_version"] == cuda and entry["no_vmm"] is True
    assert entry["cuda_root"]["wheels"], "the lock records the CUDA wheels used"
    assert entry["build_key"] == json.loads(printed.stdout)["build_key"]  # --print knew it without the wheels
    for wheel in entry["cuda_root"]["wheels"]:  # none by --print; each once by the build, from the index the lock names
        path = f"/files/{wheel['filename']}"  # (none at all when it was in the cache before)
        assert pypi.requests[path] == (wheel["filename"] not in cached), wheel
        # the URL it was downloaded from: this module's index, unless the CUDA root was laid out before
        assert not fresh or wheel["url"].startswith(pypi.url[:-7]), wheel
        assert not fresh or after_print.get(path, 0) == 0, f"--print downloaded {path}"


def test_vmm_build_links_the_stub_and_needs_libcuda(vmm_build, client):
    proc = vmm_build
    assert "verify vmm: passed" in proc.stdout and "needs libcuda.so.1" in proc.stdout
    assert "verify version: skipped" in proc.stdout
    labels = image_labels(client, "buildkit-test/tiny-fork:vmm")
    assert "-DGGML_CUDA_NO_VMM=OFF" in labels["org.llama-buildkit.flags"]


def test_the_loader_finds_a_driver_mounted_where_kubernetes_mounts_it(vmm_build, client, tmp_path):
    """GKE's driver installer (and NVIDIA's device plugin) mount libcuda.so.1 at /usr/local/nvidia/lib64
    and rely on the image's LD_LIBRARY_PATH naming it, as NVIDIA's base images do."""
    driver = tmp_path / "nvidia-lib64"
    driver.mkdir()
    (tmp_path / "libcuda.c").write_text("int cuInit(unsigned int flags) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(driver / "libcuda.so.1"),
                    str(tmp_path / "libcuda.c")], check=True)
    out = client.containers.run("buildkit-test/tiny-fork:vmm", ["-c", "ldd /app/lib/libggml-cuda.so*"],
                                entrypoint=["/bin/sh"], remove=True, stdout=True, stderr=True,
                                volumes={str(driver): {"bind": "/usr/local/nvidia/lib64", "mode": "ro"}}).decode()
    assert "libcuda.so.1 => /usr/local/nvidia/lib64/libcuda.so.1" in out, out


def test_the_kubernetes_deployment_pins_the_built_image_and_asks_for_a_gpu(vmm_build, project):
    proc = buildkit("run", "--image", "buildkit-test/tiny-fork:vmm", "--model", "/models-on-the-cluster/m.gguf",
                    "--print", "--format", "k8s", cwd=project["root"], env=project["env"])
    assert proc.returncode == 0, proc.stderr
    deployment = json.loads(proc.stdout)["items"][0]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    entry = next(e for e in lock_entries(project).values() if "buildkit-test/tiny-fork:vmm" in e["tags"])
    assert container["image"] == f"buildkit-test/tiny-fork@{entry['image_digest']}"  # what a push publishes
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}  # a CUDA image, by its labels


def test_second_build_of_the_same_commit_fetches_nothing(project, fork):
    from buildkit.source.fetch import fetch_source

    info = fetch_source(fork["url"], fork["commit"], fork["commit"], project["cache"])
    assert info.fetched is False and info.bytes_fetched == 0


def test_print_shows_the_exact_buildx_command(project):
    proc = buildkit("build", "--arch", "cpu", "--print", cwd=project["root"], env=project["env"])
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("docker buildx build ")
    for part in ("--platform linux/amd64", "--target server", "--metadata-file",
                 "--label org.opencontainers.image.revision="):
        assert part in line
    # reproducible path (containerd store): OCI archive whose image names are the tags, then docker load;
    # plain path (classic store): --load with --tag
    assert ("type=oci," in line and "rewrite-timestamp=true" in line and "buildkit-test/tiny-fork:cpu" in line) or \
        ("--load" in line and "--tag buildkit-test/tiny-fork:cpu" in line)


def test_render_writes_dockerfile_and_context(project, fork, tmp_path):
    out = tmp_path / "ctx"
    proc = buildkit("render", "--arch", "sm_120", "--out", str(out), cwd=project["root"], env=project["env"])
    assert proc.returncode == 0, proc.stderr
    text = (out / "Dockerfile").read_text()
    assert "120a-real" in text and "-DGGML_CUDA_NO_VMM=ON" in text
    assert (out / "src" / "CMakeLists.txt").is_file() and not (out / "src" / ".git").exists()
    assert (out / "src" / "FORK.md").is_file()


# --- failures: one clear line, non-zero exit, no image, no lock change -------------------------

def assert_clean_failure(project, client, proc, *, message: str, tag: str):
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr[-2000:]
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(tag)


def test_broken_patch_fails_with_patch_and_file(project, client):
    before = (project["root"] / "buildkit.lock").read_bytes() if (project["root"] / "buildkit.lock").exists() else b""
    bad = project["root"] / "patches" / "0001-broken.patch"
    bad.write_text("--- a/CMakeLists.txt\n+++ b/CMakeLists.txt\n@@ -1,3 +1,3 @@\n-this line is not there\n"
                   "+replacement\n context that does not exist\n context either\n")
    try:
        proc = buildkit("build", "--arch", "cpu", "--tag", "broken-patch", cwd=project["root"], env=project["env"])
    finally:
        bad.unlink()
    assert_clean_failure(project, client, proc, message="0001-broken.patch",
                         tag="buildkit-test/tiny-fork:broken-patch")
    assert "CMakeLists.txt" in proc.stderr
    after = (project["root"] / "buildkit.lock").read_bytes() if (project["root"] / "buildkit.lock").exists() else b""
    assert after == before


def test_unknown_arch_fails_before_any_work(project, client):
    proc = buildkit("build", "--arch", "sm_99", "--tag", "unknown-arch", cwd=project["root"], env=project["env"])
    assert_clean_failure(project, client, proc, message="unknown arch 'sm_99'",
                         tag="buildkit-test/tiny-fork:unknown-arch")
    assert "sm_120" in proc.stderr


def test_arch_the_cuda_version_cannot_build(project, client):
    proc = buildkit("build", "--arch", "sm_86", "--cuda", "11.0", cwd=project["root"], env=project["env"])
    assert proc.returncode == 1 and "needs CUDA 11.1 or newer" in proc.stderr


def test_unreachable_source_says_how_to_point_elsewhere(project, client):
    proc = buildkit("build", "--arch", "cpu", "--source", "git://127.0.0.1:1/nothing.git", "--tag", "unreachable",
                    cwd=project["root"], env=project["env"])
    assert_clean_failure(project, client, proc, message="--source", tag="buildkit-test/tiny-fork:unreachable")


def test_verify_catches_a_runtime_stage_without_a_shared_library(project, client, tmp_path):
    """A runtime stage that forgot libllama-common.so.0 (seen in published images) fails verification."""
    from buildkit.plan.config import load_config
    from buildkit.flows.unit.pipeline import prepare
    from buildkit.cli.unitspecs import unit_spec
    from buildkit.core.check import Status
    from buildkit.verify.checks import verify_image
    from buildkit.engine.dockerengine import DockerEngine

    (tmp_path / "Dockerfile").write_text("FROM buildkit-test/tiny-fork:cpu\nRUN rm -f /app/lib/libllama-common.so*\n")
    subprocess.run(["docker", "buildx", "build", "--load", "-t", "buildkit-test/tiny-fork:broken-runtime",
                    str(tmp_path)], check=True, capture_output=True)
    try:
        cfg = load_config(project["root"] / "buildkit.toml", env=project["env"],
                          overrides={"build.arch": ("cpu", "test")})
        plan = prepare(unit_spec(cfg, DockerEngine()), DockerEngine(), tmp_path / "ctx").plan
        report = verify_image(plan, "buildkit-test/tiny-fork:broken-runtime", DockerEngine())
        failed = report.failures()
        assert failed and failed[0].status == Status.FAILED and "libllama-common.so.0" in failed[0].detail
    finally:
        client.images.remove("buildkit-test/tiny-fork:broken-runtime", force=True)
