"""CUDA releases and wheels from the package index's metadata (issue 41 items 3 and 4), against a real
PEP 691 / PEP 503 index on loopback (tests/pyindexserver.py) serving small real wheels made here.

What is checked: the pins of cuda-toolkit's extras, the chosen files' versions, URLs and sha256, that
resolving (and `build --print`, `render`) requests no wheel, that laying the root out downloads each
wheel once, that 13.3 to 13.5 are accepted because the index has them, and that a release the index
lacks is one line naming those it has (and, with no index, naming the built-in list)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cliutil import cli_env, write_project
from pyindexserver import PackageIndexServer, make_wheel, component_files, nvidia_index

from buildkit.core.errors import CudaRootError
from buildkit.source.cudaroot import ensure_cuda_root, planned_manifest, read_manifest
from buildkit.source.cudawheels import resolve_toolkit, toolkit_releases
from buildkit.source.pyindex import PackageIndex, index_urls

RELEASES = {"13.3.0": "13.3.10", "13.4.1": "13.4.20", "13.5.0": "13.5.37"}
PACKAGES = {"nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-cccl", "nvidia-cuda-crt", "nvidia-nvvm",
            "nvidia-cuda-culibos", "nvidia-cuda-cuobjdump", "nvidia-cublas"}


@pytest.fixture
def json_index():
    with PackageIndexServer(json=True) as server:
        shas = nvidia_index(server, RELEASES)
        # newer than the pin allows for glibc 2.35 (manylinux_2_39): pip would not take it, nor may we
        server.add("nvidia-cuda-nvcc", make_wheel("nvidia-cuda-nvcc", "13.5.37.1", "py3-none-manylinux_2_39_x86_64",
                                                  component_files("nvidia-cuda-nvcc")))
        yield server, shas


def test_the_pins_and_sha256_come_from_the_index_metadata_and_no_wheel_is_downloaded(json_index, tmp_path):
    server, shas = json_index
    index = PackageIndex(tmp_path, urls=(server.url,))
    assert toolkit_releases(index) == [(13, 3), (13, 4), (13, 5)]
    toolkit = resolve_toolkit("13.5", index, tmp_path / "meta", arch="x86_64")
    assert (toolkit.meta.package, toolkit.meta.version) == ("cuda-toolkit", "13.5.0")
    assert {w.package for w in toolkit.wheels} == PACKAGES  # the extras' pins, not the 'all' extra's nvrtc
    for w in toolkit.wheels:
        assert w.version == "13.5.37" and w.sha256 == shas[w.package, "x86_64", "13.5.37"], w
        assert w.filename.endswith("manylinux_2_17_x86_64.whl") and w.url == f"{server.url[:-7]}/files/{w.filename}"
    assert server.wheel_requests() == {}  # METADATA files (PEP 658) and pages only


def test_a_pep_503_html_index_without_metadata_files_costs_the_meta_wheel_only(tmp_path):
    with PackageIndexServer(json=False) as server:
        shas = nvidia_index(server, RELEASES, toolkit_metadata=False)
        toolkit = resolve_toolkit("13.4", PackageIndex(tmp_path, urls=(server.url,)), tmp_path / "meta", arch="aarch64")
        assert {w.sha256 for w in toolkit.wheels} == {shas[p, "aarch64", "13.4.20"] for p in PACKAGES}
        assert all(w.version == "13.4.20" and "aarch64" in w.filename for w in toolkit.wheels)
        assert server.wheel_requests() == {"/files/cuda_toolkit-13.4.1-py2.py3-none-any.whl": 1}


def test_the_layout_downloads_each_resolved_wheel_once_and_records_them(json_index, tmp_path):
    server, shas = json_index
    index = PackageIndex(tmp_path, urls=(server.url,))
    planned = planned_manifest("13.5", tmp_path, arch="x86_64", index=index)
    assert server.wheel_requests() == {}
    root = ensure_cuda_root("13.5", tmp_path, arch="x86_64", index=index)
    again = ensure_cuda_root("13.5", tmp_path, with_cublas=False, arch="x86_64", index=index)  # other root, same wheels
    assert root != again and (root / "bin" / "nvcc").is_file() and (again / "lib64" / "stubs").is_dir()
    assert sorted(server.wheel_requests().values()) == [1] * len(PACKAGES)
    manifest = read_manifest(root)
    assert manifest["wheels"] == planned["wheels"]  # what --print resolved is what the build used
    assert {w["sha256"] for w in manifest["wheels"]} == {shas[p, "x86_64", "13.5.37"] for p in PACKAGES}
    assert all(w["url"].startswith("http://127.0.0.1:") for w in manifest["wheels"])


def test_a_file_whose_bytes_differ_from_the_index_sha256_is_refused(json_index, tmp_path):
    server, _ = json_index
    toolkit = resolve_toolkit("13.5", PackageIndex(tmp_path, urls=(server.url,)), tmp_path / "meta", arch="x86_64")
    nvcc = next(f for f in server.files if f.filename == next(w.filename for w in toolkit.wheels
                                                                  if w.package == "nvidia-cuda-nvcc"))
    good = nvcc.body
    nvcc.body = good[:-1] + bytes([good[-1] ^ 1])  # the page the index serves now is cached: its sha256 is the old one
    with pytest.raises(CudaRootError, match="has sha256 .*, not the index's"):
        ensure_cuda_root("13.5", tmp_path, arch="x86_64", index=PackageIndex(tmp_path, urls=(server.url,)))
    nvcc.body = good + b"more"
    with pytest.raises(CudaRootError, match="sent more than the .* bytes the index gives for it"):
        ensure_cuda_root("13.5", tmp_path, arch="x86_64", index=PackageIndex(tmp_path, urls=(server.url,)))
    assert not list((tmp_path / "cuda-wheels").glob("*nvidia_cuda_nvcc*"))
    assert not (tmp_path / "cuda-root" / "13.5").exists()


def test_pip_s_index_settings_are_the_ones_read(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple/\nextra-index-url = file:///opt/x/simple\n")
    env = {"HOME": str(tmp_path), "XDG_CONFIG_DIRS": str(tmp_path / "none"), "PIP_CONFIG_FILE": str(conf)}
    assert index_urls(env)[-2:] == ("https://mirror.example/simple", "file:///opt/x/simple")
    assert index_urls({**env, "PIP_INDEX_URL": "http://127.0.0.1:9/simple"})[0] == "http://127.0.0.1:9/simple"
    assert index_urls({"PIP_CONFIG_FILE": os.devnull, "HOME": str(tmp_path)}) == ("https://pypi.org/simple",)


# ---------------------------------------------------------------- the CLI, on the example fork

@pytest.fixture
def project(tmp_path, example_fork, debian_base_image, json_index):
    server, _ = json_index
    write_project(tmp_path, source={"url": example_fork["url"], "commit": example_fork["commit"]},
                  image={"name": "buildkit-test/cuda-index"}, build={"arch": "sm_120"},
                  base={"provider": "wheels", "os_image": debian_base_image, "cublas": False})
    env = cli_env(tmp_path / "cache", PIP_INDEX_URL=server.url, PIP_CONFIG_FILE=os.devnull)
    env.pop("PIP_EXTRA_INDEX_URL", None)
    return tmp_path, env, server


def buildkit(project, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    root, project_env, _ = project
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *args], cwd=root, env=env or project_env,
                          capture_output=True, text=True, timeout=300)


def test_print_and_render_of_cuda_13_5_download_no_wheel(project):
    root, _, server = project
    proc = buildkit(project, "build", "--cuda", "13.5", "--print", "--json")
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert printed["variant"] == "cuda13.5-sm120" and printed["labels"]["org.llama-buildkit.cuda-version"] == "13.5"
    assert any(a.startswith("cuda-root=") and a.endswith("13.5-nocublas") for a in printed["argv"])
    assert server.wheel_requests() == {}
    proc = buildkit(project, "render", "--cuda", "13.4", "--out", str(root / "ctx"))
    assert proc.returncode == 0, proc.stderr
    assert "120a-real" in (root / "ctx" / "Dockerfile").read_text() and "nothing was downloaded" in proc.stdout
    assert server.wheel_requests() == {}


def test_a_release_the_index_lacks_is_one_line_naming_those_it_has(project):
    proc = buildkit(project, "build", "--cuda", "13.9", "--print")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "CUDA 13.9 is not on the package index" in proc.stderr and "13.3, 13.4, 13.5" in proc.stderr


def test_with_no_index_the_built_in_list_judges_and_says_so(project):
    _, env, _ = project
    offline = {**env, "PIP_INDEX_URL": "http://127.0.0.1:1/simple"}
    proc = buildkit(project, "build", "--cuda", "13.9", "--print", env=offline)
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "cannot be checked: the package index cannot be reached" in proc.stderr and "13.5" in proc.stderr


# ---------------------------------------------------------------- provider nvidia: the base image's tags

def test_provider_nvidia_checks_the_devel_tag_of_a_release_newer_than_the_list(registry_plain, tmp_path):
    """13.7 is newer than the built-in list: the registry's tags say whether NVIDIA's image has it."""
    from buildkit.core.errors import ArchError
    from buildkit.flows.unit.cudacontexts import check_cuda_available
    from buildkit.cli.unitspecs import cuda_settings
    from buildkit.oci.registry import RegistryClient
    from buildkit.oci.registryhttp import sha256_digest
    from buildkit.plan.buildplan import make_request
    from buildkit.plan.config import load_config

    repo = "nvidia/cuda"
    with RegistryClient(registry_plain.host) as client:
        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "rootfs": {"type": "layers", "diff_ids": []}}).encode()
        client.upload_blob(repo, sha256_digest(config), config, len(config))
        manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                          "digest": sha256_digest(config), "size": len(config)}, "layers": []}).encode()
        for tag in ("13.4.0-devel-ubuntu24.04", "13.6.0-devel-ubuntu24.04", "13.6.0-runtime-ubuntu24.04",
                    "13.9.0-runtime-ubuntu24.04"):
            client.put_manifest(repo, tag, manifest, "application/vnd.oci.image.manifest.v1+json")

    def cfg(version: str):
        return load_config(None, env={}, overrides={
            "build.arch": ("sm_120", "t"), "build.cuda_version": (version, "t"),
            "base.devel_image": (f"{registry_plain.host}/{repo}:{{cuda_version}}.0-devel-ubuntu24.04", "t")})

    check_cuda_available(make_request(cfg("13.6")), cuda_settings(cfg("13.6")))  # the tag is there
    with pytest.raises(ArchError) as info:
        check_cuda_available(make_request(cfg("13.9")), cuda_settings(cfg("13.9")))  # a runtime tag only
    assert "has no tag 13.9.0-devel-ubuntu24.04" in str(info.value) and "CUDA 13.4, 13.6;" in str(info.value)


def test_the_nightly_plan_stops_on_a_release_the_index_lacks(json_index, tmp_path, monkeypatch):
    """Before it asks git or the registry anything: one line naming the releases the index has."""
    from buildkit.core.errors import ArchError
    from buildkit.cli.nightlyspecs import nightly_spec
    from buildkit.flows.nightly import jobs as nightlyjobs
    from fakeengine import FakeEngine
    from buildkit.plan.config import load_config

    server, _ = json_index
    monkeypatch.setenv("PIP_INDEX_URL", server.url)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    values = {"source.url": "git://127.0.0.1:1/none", "image.name": "127.0.0.1:1/team/app", "base.provider": "wheels",
              "matrix.archs": ["sm_120"], "matrix.cuda_versions": ["13.5", "13.9"], "cache.dir": str(tmp_path)}
    cfg = load_config(None, env={}, overrides={k: (v, "test") for k, v in values.items()})
    with pytest.raises(ArchError, match=r"CUDA 13\.9 is not on the package index .*13\.3, 13\.4, 13\.5"):
        nightlyjobs.plan_nightly(nightly_spec(cfg, FakeEngine()),
                                 runners={"amd64": "ubuntu-latest", "arm64": "ubuntu-24.04-arm"})


@pytest.mark.parametrize("mode", ["stall", "trickle_body", "status_then_trickle"])
def test_an_index_that_never_finishes_its_answer_is_unreachable_at_its_deadline(mode, tmp_path):
    """A page that never ends is no answer: the deadline for the whole request cuts it (no partial page)."""
    from buildkit.source.pyindex import IndexUnreachable

    from hostile import HostileServer

    with HostileServer(mode, interval=0.5) as server:
        index = PackageIndex(tmp_path, urls=(f"http://127.0.0.1:{server.port}/simple",),
                             env={"LLAMA_BUILDKIT_INDEX_DEADLINE": "2"})
        with pytest.raises(IndexUnreachable, match="no complete answer within its deadline"):
            toolkit_releases(index)


@pytest.mark.parametrize("value", ["0", "-1", "x", "inf"])
def test_the_index_deadline_must_be_positive_seconds(value, tmp_path):
    from buildkit.core.errors import ConfigError

    with pytest.raises(ConfigError, match="LLAMA_BUILDKIT_INDEX_DEADLINE must be a number of seconds above 0"):
        PackageIndex(tmp_path, urls=(), env={"LLAMA_BUILDKIT_INDEX_DEADLINE": value})


def test_an_index_url_with_credentials_is_used_and_never_recorded(tmp_path):
    """pip's index URL may carry user:secret@: the index gets them, the manifest and lock never do."""
    with PackageIndexServer(json=True, basic_auth="team:s3cret") as server:
        nvidia_index(server, RELEASES)
        with_secret = server.url.replace("http://", "http://team:s3cret@")
        index = PackageIndex(tmp_path, urls=(with_secret,))
        root = ensure_cuda_root("13.5", tmp_path, with_cublas=False, arch="x86_64", index=index)
        text = (root / "buildkit-cuda-root.json").read_text()
        assert "s3cret" not in text and f"{server.url[:-7]}/files/" in text and "s3cret" not in index.describe()
        with pytest.raises(CudaRootError, match="answered 401") as info:
            toolkit_releases(PackageIndex(tmp_path / "other", urls=(server.url,)))
        assert "s3cret" not in str(info.value)


# ---------------------------------------------------------------- a tree of 1,200 nested folders (issue 48, item 5)

@pytest.fixture(scope="module")
def deep_fork(tmp_path_factory, git_daemon):
    """The example fork with one more commit: a .cu using a dropped CCCL iterator, 1,200 folders deep (written
    with git fast-import: no folder of it is made here, and Python's own walkers would recurse)."""
    from pathlib import Path

    from forkrepo import make_fork_repo
    from gitserver import run_git

    repo = tmp_path_factory.mktemp("deep") / "deep-fork"
    _, parent = make_fork_repo(repo, Path(__file__).resolve().parents[2] / "examples" / "tiny-fork")
    content = b"#include <cub/cub.cuh>\nauto d = cuda::discard_iterator();\n"
    stream = (b"commit refs/heads/master\ncommitter t <t@example.invalid> 1704240000 +0000\ndata 13\na deep folder"
              + f"\nfrom {parent}\nM 100644 inline {'d/' * 1200}deep.cu\ndata {len(content)}\n".encode() + content)
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=stream, check=True, capture_output=True)
    return {"url": git_daemon.url_for(repo), "commit": run_git(repo, "rev-parse", "master")}


def test_render_of_a_tree_1200_folders_deep_is_one_line_and_leaves_no_out_folder(tmp_path, deep_fork, busybox_image,
                                                                                   json_index):
    """Refused while it is exported, in one line, and render's cleanup removes the --out folder it made. Before:
    the export took 374 s (tarfile's filter resolves each member's path, one lstat per level), the CCCL scan's
    rglob raised RecursionError, and render's cleanup raised it again and left the --out folder behind."""
    server, _ = json_index
    write_project(tmp_path / "p", source=deep_fork, image={"name": "buildkit-test/deep"}, build={"arch": "sm_120"},
                  base={"provider": "wheels", "os_image": busybox_image, "cublas": False})  # never built: a small one
    env = cli_env(tmp_path / "cache", PIP_INDEX_URL=server.url, PIP_CONFIG_FILE=os.devnull)
    env.pop("PIP_EXTRA_INDEX_URL", None)
    out = tmp_path / "ctx"
    proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "render", "--cuda", "13.5", "--out", str(out)],
                          cwd=tmp_path / "p", env=env, capture_output=True, text=True, timeout=120)
    last = proc.stderr.splitlines()[-1] if proc.stderr else ""
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-600:]
    assert [line for line in proc.stderr.splitlines() if line.startswith("error")] == [last]
    assert f"the tree of {deep_fork['commit'][:12]} has a path nested in more than 64 folders (d/d/d/...)" in last
    assert not out.exists()


def test_a_kept_source_folder_refuses_the_deep_tree_before_git_writes_it(tmp_path, deep_fork):
    """sync_tree (a build's kept folder) asks git for the tree's paths first: nothing of it is written."""
    from buildkit.source.fetch import TreeTooDeep, fetch_source
    from buildkit.source.sourcetree import sync_tree

    info = fetch_source(deep_fork["url"], deep_fork["commit"], deep_fork["commit"], tmp_path / "cache")
    with pytest.raises(TreeTooDeep, match="nested in more than 64 folders"):
        sync_tree(info, tmp_path / "cache", tmp_path / "kept" / "src")
    assert not (tmp_path / "kept" / "src" / "d").exists()
