"""scripts/gpu_run.py without a GPU: layers applied into a root, the bundle and its manifest, which
library comes from where (real ELF files compiled here, run with the link farm), and the model's size."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from buildkit.verify.elfdeps import read_elf, resolve
from buildkit.core.errors import ImageSourceError
from buildkit.gpu.gpubundle import make_bundle, open_bundle
from buildkit.gpu import libplan
from buildkit.oci.ocilayout import OciArchive
from buildkit.oci.rootfs import apply_layers, secure_join

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_run.py"


# --------------------------------------------------------------------------- an OCI layout made here

def entry(name: str, data: bytes | None = None, *, kind: str = "file", link: str = "", mode: int = 0o644):
    info = tarfile.TarInfo(name)
    info.mtime = 0
    if kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif kind == "sym":
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, link, 0o777
    elif kind == "hard":
        info.type, info.linkname, info.mode = tarfile.LNKTYPE, link, mode
    else:
        info.size, info.mode = len(data or b""), mode
    return info, (io.BytesIO(data or b"") if kind == "file" else None)


def layer_blob(entries) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, fh in entries:
            tar.addfile(info, fh)
    return gzip.compress(raw.getvalue(), mtime=0)


def write_layout(folder: Path, layers: list[bytes], labels: dict | None = None) -> str:
    """An OCI image layout folder of these layers (linux/amd64, plus an arm64 image to skip);
    returns the amd64 manifest digest."""
    blobs = folder / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return "sha256:" + digest

    def manifest_for(arch_layers: list[bytes]) -> tuple[str, int]:
        config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": labels or {}},
                             "rootfs": {"type": "layers", "diff_ids": []}}).encode()
        body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": put(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                       "digest": put(b), "size": len(b)} for b in arch_layers]}).encode()
        return put(body), len(body)

    amd64, size = manifest_for(layers)
    arm64, arm_size = manifest_for([layer_blob([entry("app/arm64-only", b"no")])])
    index = {"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": arm64, "size": arm_size,
         "platform": {"os": "linux", "architecture": "arm64"}},
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": amd64, "size": size,
         "platform": {"os": "linux", "architecture": "amd64"}}]}
    (folder / "index.json").write_text(json.dumps(index))
    (folder / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return amd64


def lower():
    """The first layer (fresh file objects on every call)."""
    return [entry("app", kind="dir"), entry("app/bin", kind="dir"), entry("app/bin/tool", b"tool v1", mode=0o755),
            entry("app/lib", kind="dir"), entry("app/lib/libx.so.1", b"libx"),
            entry("app/lib/libx.so", kind="sym", link="libx.so.1"),
            entry("app/lib/libcuda.so.1", b"a driver stub that must not travel"),
            entry("data/old.txt", b"old"), entry("data/kept.txt", b"kept"),
            entry("opq/lower.txt", b"lower"), entry("opq/sub/deep.txt", b"deep"),
            entry("etc/hostname", b"image"), entry("up", kind="sym", link="../../../../../../.."),
            entry("etcdir", kind="sym", link="/etc"),
            entry("usr/local/cuda/lib64/libcudart.so.13", b"cudart"),
            entry("usr/local/cuda/lib64/libcudart.so", kind="sym", link="libcudart.so.13"),
            entry("usr/local/cuda/lib64/libcublas.so.13", b"cublas"),
            entry("usr/local/cuda/lib64/stubs/libcuda.so", b"stub")]


def upper():
    """The second layer: a whiteout, an opaque folder, hardlinks, writes through links."""
    return [entry("data/.wh.old.txt", b""), entry("opq/new.txt", b"new"), entry("opq/.wh..wh..opq", b""),
            entry("app/bin/tool2", kind="hard", link="app/bin/tool"),
            entry("app/bin/tool", b"tool v2", mode=0o755),
            entry("app/lib/libx.so.1.hard", kind="hard", link="app/lib/libx.so.1"),
            entry("up/escaped-marker", b"stays inside"), entry("etcdir/written-through-link", b"in the root's /etc")]


@pytest.fixture
def layout(tmp_path):
    folder = tmp_path / "layout"
    digest = write_layout(folder, [layer_blob(lower()), layer_blob(upper())],
                          labels={"org.llama-buildkit.arch": "sm_90"})
    return folder, digest


def test_layers_apply_in_order_with_whiteouts_opaque_dirs_and_links(layout, tmp_path):
    folder, digest = layout
    with OciArchive(folder) as archive:
        image = archive.image("linux/amd64")
        assert image.manifest_digest == digest
        applied = apply_layers(image, tmp_path / "root")
    root = applied.root
    lower, upper = image.layers[0].digest, image.layers[1].digest
    assert not (root / "data" / "old.txt").exists() and (root / "data" / "kept.txt").read_bytes() == b"kept"
    assert sorted(p.name for p in (root / "opq").iterdir()) == ["new.txt"]  # the marker came after new.txt
    assert (root / "app/bin/tool").read_bytes() == b"tool v2" and os.access(root / "app/bin/tool", os.X_OK)
    # the hardlink was made to the lower layer's file, before the upper layer replaced it
    assert (root / "app/bin/tool2").read_bytes() == b"tool v1"
    assert os.stat(root / "app/lib/libx.so.1.hard").st_ino == os.stat(root / "app/lib/libx.so.1").st_ino
    assert os.readlink(root / "app/lib/libx.so") == "libx.so.1"
    # links are kept verbatim, but whatever goes through them lands inside the root
    assert os.readlink(root / "etcdir") == "/etc"
    assert (root / "etc" / "written-through-link").read_bytes() == b"in the root's /etc"
    assert (root / "escaped-marker").read_bytes() == b"stays inside"
    assert not (tmp_path.parent / "escaped-marker").exists() and not Path("/etc/written-through-link").exists()
    assert secure_join(root, "up/up/etcdir/hostname") == root / "etc" / "hostname"
    assert applied.origin["app/bin/tool"] == upper and applied.origin["app/lib/libx.so.1"] == lower
    assert "data/old.txt" not in applied.origin and "opq/lower.txt" not in applied.origin
    assert "opq/sub/deep.txt" not in applied.origin and not (root / "app" / "arm64-only").exists()


@pytest.mark.parametrize("bad", [
    [entry("../outside.txt", b"x")],
    [entry("app/../../outside.txt", b"x")],
    [entry("/abs.txt", b"x")],
    [entry("app/evil", kind="hard", link="../../outside.txt")],
], ids=["dotdot", "nested-dotdot", "absolute", "hardlink-out"])
def test_path_traversal_is_refused(tmp_path, bad):
    folder = tmp_path / "layout"
    write_layout(folder, [layer_blob(lower()), layer_blob(bad)])
    with OciArchive(folder) as archive:
        with pytest.raises(ImageSourceError, match="refused"):
            apply_layers(archive.image(), tmp_path / "work" / "root")
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "work" / "outside.txt").exists()


def test_bundle_holds_app_only_with_a_manifest_and_is_verified(layout, tmp_path):
    folder, digest = layout
    out = tmp_path / "b.tar.xz"
    manifest = make_bundle(folder, out, scratch=tmp_path)
    assert manifest["image"]["manifest_digest"] == digest
    assert manifest["image"]["labels"] == {"org.llama-buildkit.arch": "sm_90"}
    files = {f["path"]: f for f in manifest["files"]}
    assert sorted(files) == ["app/bin/tool", "app/bin/tool2", "app/lib/libx.so", "app/lib/libx.so.1",
                             "app/lib/libx.so.1.hard"]  # the driver stub stays behind, nothing outside /app
    tool = files["app/bin/tool"]
    assert tool["sha256"] == hashlib.sha256(b"tool v2").hexdigest() and tool["size"] == 7
    assert tool["image_path"] == "/app/bin/tool" and tool["mode"] == 0o755
    assert tool["layer"] == manifest["image"]["layers"][1] and files["app/lib/libx.so.1"]["layer"] == \
        manifest["image"]["layers"][0]
    assert files["app/lib/libx.so"] == {**files["app/lib/libx.so"], "type": "symlink", "target": "libx.so.1"}
    assert json.loads((tmp_path / "b.tar.xz.manifest.json").read_text()) == manifest

    unpacked, again = open_bundle(out, tmp_path / "work")
    assert again == manifest and (unpacked / "app/bin/tool").read_bytes() == b"tool v2"
    (unpacked / "app/bin/tool").write_bytes(b"tool v3")
    with pytest.raises(ImageSourceError, match="app/bin/tool: sha256 differs"):
        open_bundle(unpacked, tmp_path)
    (unpacked / "app/bin/tool").write_bytes(b"tool v2")
    (unpacked / "app/lib/stray.so").write_bytes(b"")
    with pytest.raises(ImageSourceError, match="stray.so: not in the manifest"):
        open_bundle(unpacked, tmp_path)


@pytest.mark.parametrize("choice,expected", [
    ("cudart", ["cuda/lib64/libcudart.so", "cuda/lib64/libcudart.so.13"]),
    ("all", ["cuda/lib64/libcublas.so.13", "cuda/lib64/libcudart.so", "cuda/lib64/libcudart.so.13"]),
])
def test_bundle_carries_the_cuda_runtime_when_asked_never_the_stub(layout, tmp_path, choice, expected):
    folder, _ = layout
    manifest = make_bundle(folder, tmp_path / "b.tar.xz", with_cuda=choice, scratch=tmp_path,
                           extra=["etc/hostname"])
    paths = [f["path"] for f in manifest["files"]]
    assert [p for p in paths if p.startswith("cuda/")] == expected
    assert "extra/etc/hostname" in paths and not any("stub" in p for p in paths)
    unpacked, _ = open_bundle(tmp_path / "b.tar.xz", tmp_path / "work")
    assert (unpacked / "extra/etc/hostname").read_bytes() == b"image"


def test_a_bundle_with_a_climbing_entry_is_not_unpacked(tmp_path):
    evil = tmp_path / "evil.tar.xz"
    with tarfile.open(evil, "w:xz") as tar:
        body = json.dumps({"bundle_format": 1, "files": []}).encode()
        info, fh = entry("manifest.json", body)
        tar.addfile(info, fh)
        info, fh = entry("../../escaped", b"x")
        tar.addfile(info, fh)
    with pytest.raises(ImageSourceError):
        open_bundle(evil, tmp_path / "work")
    assert not (tmp_path / "escaped").exists()


def test_an_image_without_app_is_refused(tmp_path):
    folder = tmp_path / "layout"
    write_layout(folder, [layer_blob([entry("etc/hostname", b"x")])])
    with pytest.raises(ImageSourceError, match="no /app"):
        make_bundle(folder, tmp_path / "b.tar.xz", scratch=tmp_path)


# --------------------------------------------------------------------------- which file comes from where

CC = shutil.which("cc") or ""
needs_cc = pytest.mark.skipif(not CC, reason="no C compiler to make ELF files")


def compile_so(path: Path, soname: str, source: str, *libs: Path, extra: tuple[str, ...] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.with_name(path.name + ".c")
    src.write_text(source)
    argv = [CC, "-shared", "-fPIC", "-o", str(path), str(src), f"-Wl,-soname,{soname}", *extra]
    for lib in libs:
        argv += [f"-L{lib.parent}", f"-l:{lib.name}"]
    subprocess.run(argv, check=True, capture_output=True)
    src.unlink()
    return path


def who(tag: str) -> str:
    return f'const char *who_{tag}(void) {{ return "{tag}"; }}\n'


@pytest.fixture
def fake_host(tmp_path):
    """A bundle whose llama-server needs libggml-cuda (-> libcudart.so.13, libcublas.so.13, libcuda.so.1)
    and libgomp-like libfoo, and host folders: a driver, a CUDA (pip layout) and a system folder."""
    t = tmp_path
    build = t / "build"
    # link-time stand-ins with the right sonames
    cudart_l = compile_so(build / "libcudart.so.13", "libcudart.so.13", "const char *cudart(void){return 0;}")
    cublas_l = compile_so(build / "libcublas.so.13", "libcublas.so.13", "const char *cublas(void){return 0;}")
    cuda_l = compile_so(build / "libcuda.so.1", "libcuda.so.1", "const char *cuda(void){return 0;}")
    foo_l = compile_so(build / "libfoo.so.1", "libfoo.so.1", "const char *foo(void){return 0;}")
    bundle = t / "bundle"
    ggml = compile_so(bundle / "app/lib/libggml-cuda.so.0", "libggml-cuda.so.0",
                      "const char *cudart(void); const char *cublas(void); const char *cuda(void);"
                      "const char *foo(void);"
                      "const char *report(void) { static char b[256]; extern int sprintf(char*, const char*, ...);"
                      " sprintf(b, \"cudart=%s cublas=%s cuda=%s foo=%s\", cudart(), cublas(), cuda(), foo());"
                      " return b; }", cudart_l, cublas_l, cuda_l, foo_l,
                      extra=("-Wl,--enable-new-dtags", "-Wl,-rpath,/nonexistent/build/bin"))
    exe = bundle / "app" / "llama-server"
    (t / "main.c").write_text('#include <stdio.h>\nconst char *report(void);\n'
                              'int main(void) { puts(report()); return 0; }\n')
    subprocess.run([CC, "-o", str(exe), str(t / "main.c"), f"-L{ggml.parent}", f"-l:{ggml.name}",
                    "-Wl,--allow-shlib-undefined"], check=True, capture_output=True)
    # a libcuda stub in the image that must never be used, the image's own cudart
    compile_so(bundle / "app/lib/libcuda.so.1", "libcuda.so.1", 'const char *cuda(void){return "image-stub";}')
    compile_so(bundle / "cuda/lib64/libcudart.so.13", "libcudart.so.13", 'const char *cudart(void){return "image";}')
    # the host
    driver, cuda, system = t / "host/nvidia/lib64", t / "host/site-packages/nvidia/cu13/lib", t / "host/usr/lib"
    compile_so(driver / "libcuda.so.1", "libcuda.so.1", 'const char *cuda(void){return "host-driver";}')
    compile_so(cuda / "libcudart.so.13", "libcudart.so.13", 'const char *cudart(void){return "host-cuda";}')
    compile_so(cuda / "libcublas.so.13", "libcublas.so.13", 'const char *cublas(void){return "host-cuda";}')
    compile_so(system / "libfoo.so.1", "libfoo.so.1", 'const char *foo(void){return "host-system";}')
    host = libplan.HostDirs(driver=[str(driver)], cuda=[str(cuda)],
                            system=[str(system), "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                                    "/usr/lib64", "/lib", "/usr/lib"])
    return {"bundle": bundle, "host": host, "tmp": t}


def run_with_farm(bundle: Path, farm: Path) -> str:
    proc = subprocess.run([str(bundle / "app" / "llama-server")], env={"LD_LIBRARY_PATH": str(farm)},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@needs_cc
def test_elf_reader_matches_what_the_compiler_wrote(fake_host):
    info = read_elf(fake_host["bundle"] / "app/lib/libggml-cuda.so.0")
    assert info.soname == "libggml-cuda.so.0" and info.elf_class == 2
    assert {"libcudart.so.13", "libcublas.so.13", "libcuda.so.1", "libfoo.so.1"} <= set(info.needed)
    assert info.runpath == ("/nonexistent/build/bin",) and info.rpath == ()
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-d", str(info.path)], capture_output=True, text=True).stdout
        assert [ln.split("[")[1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln] == list(info.needed)


@needs_cc
def test_driver_from_host_cuda_from_image_when_carried(fake_host):
    bundle, host = fake_host["bundle"], fake_host["host"]
    choices = {c.soname: c for c in libplan.plan(bundle, host)}
    assert choices["libggml-cuda.so.0"].origin == "image"
    assert choices["libcuda.so.1"].origin == "host-driver"  # not the image's stub
    assert (choices["libcuda.so.1"].path or "").startswith(host.driver[0])
    assert choices["libcudart.so.13"].origin == "image" and "/cuda/lib64/" in (choices["libcudart.so.13"].path or "")
    assert choices["libcublas.so.13"].origin == "host-cuda"  # the bundle does not carry it
    assert choices["libfoo.so.1"].origin == "host-system" and choices["libc.so.6"].origin == "host-system"
    farm = libplan.link_farm(list(choices.values()), fake_host["tmp"] / "libs")
    checked = {c.soname: c for c in libplan.check(bundle, farm, host)}
    assert {k: c.origin for k, c in checked.items()} == {k: c.origin for k, c in choices.items()}
    # the real dynamic linker agrees: each function says which file it came from
    assert run_with_farm(bundle, farm) == "cudart=image cublas=host-cuda cuda=host-driver foo=host-system"
    text = libplan.table(list(checked.values()), bundle)
    assert "libcuda.so.1" in text and "<bundle>/cuda/lib64/libcudart.so.13" in text


@needs_cc
def test_cuda_from_host_and_missing_libraries(fake_host):
    bundle, host = fake_host["bundle"], fake_host["host"]
    choices = libplan.plan(bundle, host, cuda_from="host")
    farm = libplan.link_farm(choices, fake_host["tmp"] / "libs")
    assert run_with_farm(bundle, farm) == "cudart=host-cuda cublas=host-cuda cuda=host-driver foo=host-system"
    no_driver = libplan.HostDirs(driver=[str(fake_host["tmp"] / "none")], cuda=host.cuda, system=host.system)
    missing = {c.soname: c.origin for c in libplan.plan(bundle, no_driver)}
    assert missing["libcuda.so.1"] == "missing"
    shutil.rmtree(bundle / "cuda")
    with pytest.raises(ValueError, match="carries no CUDA runtime"):
        libplan.plan(bundle, host, cuda_from="image")


@needs_cc
def test_script_dry_run_needs_only_the_stdlib(fake_host, tmp_path):
    """`run --dry-run` under `python -S` (no site-packages: no click, docker, git, pyelftools)."""
    bundle, host = fake_host["bundle"], fake_host["host"]
    files = []
    for p in sorted(bundle.rglob("*")):
        if p.is_file():
            files.append({"path": p.relative_to(bundle).as_posix(), "type": "file", "size": p.stat().st_size,
                          "sha256": hashlib.sha256(p.read_bytes()).hexdigest()})
    (bundle / "manifest.json").write_text(json.dumps({"bundle_format": 1, "image": {"manifest_digest": "sha256:x"},
                                                      "files": files}))
    out = tmp_path / "out"
    argv = [sys.executable, "-S", str(SCRIPT), "run", str(bundle), "--dry-run", "--out", str(out),
            "--work", str(tmp_path / "w"), "--driver-dir", host.driver[0], "--cuda-dir", host.cuda[0]]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 2 and "error: libraries not found: libfoo.so.1" in proc.stdout, proc.stdout
    proc = subprocess.run(argv + ["--system-dir", host.system[0]], capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    origins = {c["soname"]: c["origin"] for c in summary["libraries_resolved"]}
    assert origins["libcuda.so.1"] == "host-driver" and origins["libcudart.so.13"] == "image"
    assert "libcuda.so.1" in proc.stdout and "host-driver" in proc.stdout


def test_help_explains_each_subcommand():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for word in ("extract", "model", "run", "manifest", "/health"):
        assert word in proc.stdout
    for sub in ("extract", "model", "run"):
        assert subprocess.run([sys.executable, str(SCRIPT), sub, "--help"], capture_output=True,
                              timeout=60).returncode == 0


def test_resolution_of_a_system_program():
    res = resolve([Path("/bin/ls")] if Path("/bin/ls").exists() else [Path(sys.executable)])
    assert res.libraries and not res.missing and "libc.so.6" in res.libraries


# --------------------------------------------------------------------------- model size

def test_model_size_matches_the_written_file(tmp_path):
    gguf = pytest.importorskip("gguf")
    sys.path.insert(0, str(ROOT / "tests"))
    from tinymodel import Shape, layers_for_size, model_size, write_llama_model

    shape = Shape(n_layer=2, n_embd=128, n_head=4, n_ff=256)
    for file_type in ("f32", "f16", "q8_0"):
        path = write_llama_model(tmp_path / f"m-{file_type}.gguf", shape, file_type=file_type)
        reader = gguf.GGUFReader(path)
        params, nbytes = model_size(shape, file_type)
        assert params == sum(int(t.n_elements) for t in reader.tensors)
        assert nbytes == sum(int(t.n_bytes) for t in reader.tensors)
        assert path.stat().st_size >= nbytes
    big = Shape(n_layer=1, n_embd=2048, n_head=16, n_ff=5632)
    n = layers_for_size(600 * 2**20, big, "q8_0")
    per_layer = model_size(Shape(2, 2048, 16, 5632), "q8_0")[1] - model_size(big, "q8_0")[1]
    got = model_size(Shape(n, 2048, 16, 5632), "q8_0")[1]
    assert abs(got - 600 * 2**20) <= per_layer / 2
    proc = subprocess.run([sys.executable, str(SCRIPT), "model", str(tmp_path / "x.gguf"), "--dry-run"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and f"{n} layers" in proc.stdout and not (tmp_path / "x.gguf").exists()


def test_arguments_after_double_dash_go_to_llama_server():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_run", SCRIPT)
    assert spec is not None and spec.loader is not None, SCRIPT
    gpu_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_run)

    ours, theirs = gpu_run.split_server_args(["run", "b.tar.xz", "--model", "m.gguf", "--", "-lv", "4", "--foo"])
    assert ours == ["run", "b.tar.xz", "--model", "m.gguf"] and theirs == ["-lv", "4", "--foo"]
    assert gpu_run.split_server_args(["run", "b"]) == (["run", "b"], [])
    assert gpu_run.KEY_LINE.search("common_param:   - CUDA0   : NVIDIA H200 (143155 MiB, 142629 MiB free)")
    assert gpu_run.KEY_LINE.search("system_info: n_threads = 16 | CUDA : ARCHS = 900 | NO_VMM = 1 |")
    assert gpu_run.KEY_LINE.search("load_tensors: offloaded 12/12 layers to GPU")
