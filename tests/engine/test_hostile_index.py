"""A hostile package index on loopback (issue 48, item 2): nothing it says becomes a path or a URL scheme
buildkit did not choose (source/indexpage.py, source/pyindex.py), and a wheel it serves unpacks within bounds
(source/cudalayout.py). Each case is a real index (tests/pyindexserver.py) serving NVIDIA-shaped wheels, with
one thing in its answer changed the way an attacker who runs the index would change it. Before, each of
these wrote outside the cache, read a local file, hung, unpacked without end, or was a traceback."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cliutil import cli_env, write_project
from pyindexserver import JSON_TYPE, PackageIndexServer, bomb_wheel, nvidia_index

from buildkit.core.errors import CudaRootError
from buildkit.source.cudaroot import ensure_cuda_root
from buildkit.source.cudawheels import resolve_toolkit, toolkit_releases
from buildkit.source.pyindex import IndexUnreachable, PackageIndex

RELEASES = {"13.5.0": "13.5.37"}
NVCC = "nvidia_cuda_nvcc-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"


class HostileIndex(PackageIndexServer):
    """The index of tests/pyindexserver.py whose project pages pass through `edit` (project, page) -> page:
    the JSON document (a dict) or the HTML text."""

    def __init__(self, edit, *, json: bool = True) -> None:
        super().__init__(json=json)
        self.edit = edit

    def page(self, project: str, as_json: bool) -> tuple[bytes, str]:
        body, ctype = super().page(project, as_json)
        if as_json:
            return json.dumps(self.edit(project, json.loads(body))).encode(), ctype
        return self.edit(project, body.decode()).encode(), ctype


def entry(doc: dict, filename: str) -> dict:
    return next(f for f in doc["files"] if f["filename"] == filename)


# ---------------------------------------------------------------- a hash that is a path (issue 48, high 2)

def test_a_pep_691_sha256_that_is_a_path_is_refused_and_nothing_is_written(tmp_path):
    """hashes.sha256 of the cuda-toolkit file named the METADATA's cache file: ../../../outside/x.METADATA."""
    def edit(project, doc):
        if project == "cuda-toolkit":
            doc["files"][0]["hashes"]["sha256"] = "../../../outside/x"
        return doc

    with HostileIndex(edit) as server:
        nvidia_index(server, RELEASES)
        index = PackageIndex(tmp_path / "cache", urls=(server.url,))
        with pytest.raises(CudaRootError, match=r"sha256 '\.\./\.\./\.\./outside/x', which is not 64 lowercase hex"):
            resolve_toolkit("13.5", index, tmp_path / "cache" / "meta", arch="x86_64")
    assert not (tmp_path / "outside").exists()


def test_a_pep_503_fragment_that_is_a_path_is_refused_and_nothing_is_written(tmp_path):
    def edit(project, html):
        return html.replace("#sha256=", "#sha256=../../../outside/", 1) if project == "cuda-toolkit" else html

    with HostileIndex(edit, json=False) as server:
        nvidia_index(server, RELEASES)
        index = PackageIndex(tmp_path / "cache", urls=(server.url,))
        with pytest.raises(CudaRootError, match=r"sha256 '\.\./\.\./\.\./outside/[0-9a-f]+', which is not 64"):
            resolve_toolkit("13.5", index, tmp_path / "cache" / "meta", arch="x86_64")
    assert not (tmp_path / "outside").exists()


def test_print_against_an_index_whose_hash_is_a_path_is_one_line_exit_1(tmp_path):
    """`build --print` (no engine needed: the index is asked before anything else) refuses in one line."""
    def edit(project, doc):
        if project == "cuda-toolkit":
            doc["files"][0]["hashes"]["sha256"] = "../../../outside/x"
        return doc

    with HostileIndex(edit) as server:
        nvidia_index(server, RELEASES)
        write_project(tmp_path / "p", source={"url": "git://127.0.0.1:1/none", "commit": "a" * 40},
                      image={"name": "buildkit-test/hostile-index"}, build={"arch": "sm_120"},
                      base={"provider": "wheels", "os_image": "buildkit-test/none:never", "cublas": False})
        env = cli_env(tmp_path / "cache", PIP_INDEX_URL=server.url, PIP_CONFIG_FILE=os.devnull)
        env.pop("PIP_EXTRA_INDEX_URL", None)
        proc = subprocess.run([sys.executable, "-m", "buildkit.cli", "build", "--cuda", "13.5", "--print"],
                              cwd=tmp_path / "p", env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: the package index page http://127.0.0.1:")
    assert "which is not 64 lowercase hex digits; buildkit refuses the page" in proc.stderr
    assert not (tmp_path / "outside").exists()


# ---------------------------------------------------------------- a wheel name that is a path (high 3)

@pytest.mark.parametrize("form", ["json", "html"])
def test_a_wheel_name_whose_build_tag_climbs_out_is_refused_and_nothing_is_downloaded(tmp_path, form):
    """The chained attack: the cuda-wheels/nvidia_cuda_nvcc-13.5.37-0/ folder (which a hash-path write made
    before) and a file name whose build tag is 0/../../../outside/x: the wheel went to tmp/outside."""
    hostile = "nvidia_cuda_nvcc-13.5.37-0/../../../outside/x-py3-none-manylinux_2_17_x86_64.whl"

    def edit(project, page):
        if project != "nvidia-cuda-nvcc":
            return page
        if form == "json":
            entry(page, NVCC)["filename"] = hostile
            return page
        return page.replace(f">{NVCC}<", ">x<").replace(f"files/{NVCC}", "files/" + hostile.replace("/", "%2F"))

    (tmp_path / "cache" / "cuda-wheels" / "nvidia_cuda_nvcc-13.5.37-0").mkdir(parents=True)
    with HostileIndex(edit, json=form == "json") as server:
        nvidia_index(server, RELEASES)
        index = PackageIndex(tmp_path / "cache", urls=(server.url,))
        with pytest.raises(CudaRootError, match="which is not a plain wheel file name; buildkit refuses the page"):
            ensure_cuda_root("13.5", tmp_path / "cache", with_cublas=False, arch="x86_64", index=index)
        assert server.wheel_requests() == {}
    assert not (tmp_path / "outside").exists()


# ---------------------------------------------------------------- file: URLs a remote page names (medium 9)

def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("target", ["a local file", "a FIFO"])
def test_a_remote_page_naming_a_file_url_is_refused_without_opening_it(tmp_path, target):
    """Before: the local file was read and its sha256 printed in the mismatch line; a FIFO hung the command
    (and file:///dev/zero copied until the disk was full)."""
    secret = tmp_path / "secret.whl"
    if target == "a FIFO":
        _fifo(secret)
    else:
        secret.write_bytes(b"the user's own file")

    def edit(project, doc):
        if project == "nvidia-cuda-nvcc":
            entry(doc, NVCC)["url"] = secret.as_uri()
        return doc

    with HostileIndex(edit) as server:
        nvidia_index(server, RELEASES)
        index = PackageIndex(tmp_path / "cache", urls=(server.url,))
        outcome: list[BaseException | None] = []

        def lay_out() -> None:
            try:
                ensure_cuda_root("13.5", tmp_path / "cache", with_cublas=False, arch="x86_64", index=index)
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
                outcome.append(exc)

        worker = threading.Thread(target=lay_out, daemon=True)
        worker.start()
        worker.join(60)
    assert outcome, "the lay-out still waits on the file: URL"
    assert isinstance(outcome[0], CudaRootError), outcome
    message = str(outcome[0])
    assert f"at {secret.as_uri()}: only http(s) URLs are followed" in message
    if target == "a local file":
        assert hashlib.sha256(secret.read_bytes()).hexdigest() not in message


def test_a_file_index_configured_here_may_name_its_files_and_a_fifo_among_them_is_refused(tmp_path):
    """A local mirror folder (file: index) lays the root out from its own file: URLs; a wheel there that is
    a FIFO is one line at once (regular files only), not a wait for a writer."""
    with PackageIndexServer(json=False) as server:
        nvidia_index(server, RELEASES)
        files = {f.filename: f.body for f in server.files}
        files |= {f.filename + ".metadata": f.metadata for f in server.files if f.metadata}
        pages = {p: server.page(p, False)[0].decode() for p in {f.project for f in server.files}}
    mirror = tmp_path / "mirror"
    (mirror / "files").mkdir(parents=True)
    for name, body in files.items():
        (mirror / "files" / name).write_bytes(body)
    for project, html in pages.items():
        (mirror / "simple" / project).mkdir(parents=True)
        (mirror / "simple" / project / "index.html").write_text(html.replace("../../files/",
                                                                             (mirror / "files").as_uri() + "/"))
    local = PackageIndex(tmp_path / "cache", urls=((mirror / "simple").as_uri(),))
    root = ensure_cuda_root("13.5", tmp_path / "cache", with_cublas=False, arch="x86_64", index=local)
    assert (root / "bin" / "nvcc").is_file()
    (mirror / "files" / NVCC).unlink()
    _fifo(mirror / "files" / NVCC)
    outcome: list[BaseException] = []
    worker = threading.Thread(target=lambda: outcome.append(pytest.raises(CudaRootError, ensure_cuda_root, "13.5",
                                                                          tmp_path / "other", with_cublas=False,
                                                                          arch="x86_64", index=local).value),
                              daemon=True)
    worker.start()
    worker.join(60)
    assert outcome and "is a FIFO, not a file; buildkit reads only regular files" in str(outcome[0])


# ---------------------------------------------------------------- pages and wheels without end

def test_a_json_page_nested_100000_deep_is_one_line(tmp_path):
    class Deep(PackageIndexServer):
        def page(self, project: str, as_json: bool) -> tuple[bytes, str]:
            return b'{"files": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", JSON_TYPE

    with Deep() as server:
        nvidia_index(server, RELEASES)
        with pytest.raises(IndexUnreachable, match=r"is not a PEP 691 project page \(RecursionError\)"):
            toolkit_releases(PackageIndex(tmp_path, urls=(server.url,)))


@pytest.mark.parametrize("bomb", ["5 GiB of zeros", "20,001 members"])
def test_a_wheel_that_unpacks_beyond_its_bounds_is_refused_before_a_byte_is_written(tmp_path, bomb):
    """A wheel with the index's right sha256 and size that unpacks to 5 GiB (650 members of 8 MiB of zeros in
    5 MB) or holds 20,001 members: refused from its directory, before anything is unpacked. Before: unpacked
    until the disk was full."""
    import io
    import zipfile

    with PackageIndexServer(json=True) as server:
        nvidia_index(server, RELEASES)
        nvcc = next(f for f in server.files if f.filename == NVCC)
        if bomb == "5 GiB of zeros":
            _, nvcc.body, _ = bomb_wheel("nvidia-cuda-nvcc", "13.5.37", "py3-none-manylinux_2_17_x86_64", 650, 8 << 20)
        else:
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as z:
                for i in range(20_001):
                    z.writestr(f"nvidia/cu13/include/h{i}.h", b"")
            nvcc.body = buf.getvalue()
        index = PackageIndex(tmp_path / "cache", urls=(server.url,))
        said = "unpacks to 5,452,595,[0-9]{3} bytes, more than the 4 GiB" if bomb.startswith("5") else \
            "has 20,001 members, more than the 20,000"
        with pytest.raises(CudaRootError, match=f"{NVCC} {said}"):
            ensure_cuda_root("13.5", tmp_path / "cache", with_cublas=False, arch="x86_64", index=index)
    leftovers = [p for p in (tmp_path / "cache" / "cuda-root").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []
