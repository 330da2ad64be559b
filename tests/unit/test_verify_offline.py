"""Verification that runs nothing of the image (issue 11): ld.so's folders per machine, binfmt_misc
handlers, and the ELF-machine and NEEDED checks on image trees made of small ELF files (elfbytes.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildkit.engine.current import use_engine
from buildkit.plan.buildplan import make_plan, make_request
from buildkit.plan.plantypes import Resolved
from buildkit.plan.request import SourceFacts
from buildkit.plan.config import load_config
from buildkit.verify import binfmt
from buildkit.verify.elfcheck import check_elf_machine, check_needed, elf_files, expected_absent
from buildkit.verify.elfdeps import SYSTEM_DIRS, machine_system_dirs
from buildkit.verify.imagetree import ImageTree, resolve_in_tree, wanted
from buildkit.verify.checks import verify_image
from elfbytes import EM_AARCH64, EM_ARM, EM_X86_64, elf_bytes, write_elf
from fakeengine import FakeEngine

COMMIT = "c0ffee" + "0" * 34
ARM_DIRS = ("/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib")

QEMU_AARCH64 = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: POCF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""
QEMU_X86_64 = QEMU_AARCH64.replace("aarch64", "x86_64").replace("0200b700", "02003e00")
WINE = "enabled\ninterpreter /usr/bin/wine\nflags: \nextension .exe\n"


def plan_for(arch: str = "cpu", platform: str = "linux/arm64", **overrides):
    values = {"build.arch": (arch, "test"), "build.platform": (platform, "test"),
              **{k: (v, "test") for k, v in overrides.items()}}
    cfg = load_config(None, env={}, overrides=values)
    facts = SourceFacts(url="https://example.invalid/fork", commit=COMMIT, commit_time=1767225600,
                        build_number=1, patch_set_sha256="", patch_names=())
    return make_plan(make_request(cfg), Resolved(facts, "t", "9.9.9"))


# ---------------------------------------------------------------- ld.so's folders per machine

def test_system_dirs_follow_the_elf_machine():
    assert machine_system_dirs(EM_AARCH64) == ARM_DIRS
    assert machine_system_dirs(EM_X86_64) == SYSTEM_DIRS
    assert not any("x86_64" in d or "lib64" in d for d in machine_system_dirs(EM_AARCH64))
    assert machine_system_dirs(EM_ARM) == ("/lib", "/usr/lib")


# ---------------------------------------------------------------- binfmt_misc

def handler_of(name: str, text: str) -> binfmt.Handler:
    """The handler a registration file's text describes (these texts are all readable)."""
    handler = binfmt.parse_handler(name, text)
    assert handler is not None, name
    return handler


def name_of(handler: binfmt.Handler | None) -> str | None:
    return None if handler is None else handler.name


def test_a_qemu_handler_is_parsed_and_matches_only_its_machine():
    handler = handler_of("qemu-aarch64", QEMU_AARCH64)
    assert handler.enabled and handler.interpreter.endswith("aarch64-binfmt-P") and handler.flags == "POCF"
    assert handler.magic[:4] == b"\x7fELF" and len(handler.mask) == len(handler.magic) == 20
    assert handler.matches(elf_bytes(EM_AARCH64, e_type=2)) and handler.matches(elf_bytes(EM_AARCH64, e_type=3))
    assert not handler.matches(elf_bytes(EM_X86_64))
    assert not handler.matches(elf_bytes(EM_AARCH64, elf_class=1))  # 32-bit is another handler's
    assert not handler.matches(b"\x7fELF\x02")  # too short to judge


def test_disabled_extension_and_broken_handlers():
    off = handler_of("qemu-aarch64", QEMU_AARCH64.replace("enabled", "disabled"))
    assert not off.enabled and binfmt.handler_for(elf_bytes(EM_AARCH64), [off]) is None
    wine = handler_of("wine", WINE)
    assert wine.extension == ".exe" and not wine.matches(elf_bytes(EM_AARCH64))
    assert binfmt.parse_handler("junk", "enabled\nmagic zz\n") is None
    assert binfmt.parse_handler("bad-hex", QEMU_AARCH64.replace("7f454c46", "7g454c46")) is None


def test_registered_reads_a_binfmt_misc_folder(tmp_path):
    (tmp_path / "register").write_text("")
    (tmp_path / "status").write_text("enabled\n")
    (tmp_path / "qemu-aarch64").write_text(QEMU_AARCH64)
    (tmp_path / "qemu-x86_64").write_text(QEMU_X86_64)
    (tmp_path / "wine").write_text(WINE)
    handlers = binfmt.registered(tmp_path)
    assert [h.name for h in handlers] == ["qemu-aarch64", "qemu-x86_64", "wine"]
    assert name_of(binfmt.handler_for(elf_bytes(EM_AARCH64), handlers)) == "qemu-aarch64"
    assert name_of(binfmt.handler_for(elf_bytes(EM_X86_64), handlers)) == "qemu-x86_64"
    (tmp_path / "status").write_text("disabled\n")  # binfmt_misc off as a whole: no handler runs anything
    assert binfmt.handler_for(elf_bytes(EM_AARCH64), binfmt.registered(tmp_path)) is None
    assert binfmt.registered(tmp_path / "not-mounted") == []


def test_a_foreign_image_runs_only_under_a_matching_handler():
    header = elf_bytes(EM_AARCH64, e_type=2)
    why = binfmt.not_runnable("linux/arm64", "amd64", header, [])
    assert why == ("linux/arm64 image on a linux/amd64 engine and no binfmt handler for AArch64 registered: "
                   "not run")
    x86_only = [handler_of("qemu-x86_64", QEMU_X86_64)]
    assert binfmt.not_runnable("linux/arm64", "amd64", header, x86_only) == why
    assert binfmt.not_runnable("linux/arm64", "amd64", header, [handler_of("q", QEMU_AARCH64)]) == ""
    assert binfmt.not_runnable("linux/amd64", "amd64", elf_bytes(EM_X86_64), []) == ""
    assert "for Advanced Micro Devices X86-64" in binfmt.not_runnable("linux/amd64", "arm64", elf_bytes(EM_X86_64), [])
    assert binfmt.elf_header(EM_AARCH64) == elf_bytes(EM_AARCH64, e_type=2)[:20]


def test_a_foreign_image_is_run_only_where_a_handler_can_emulate_it(tmp_path, monkeypatch):
    """verify_image on an amd64 (fake) engine: an arm64 image's programs never run without a handler
    (not even /bin/cat for the CPU flags), and --version runs, saying so, with one."""
    monkeypatch.setattr(binfmt, "BINFMT_DIR", tmp_path)
    fake = FakeEngine(run_result=lambda image, entrypoint, args: (0, f"version: 1 (build 1, commit {COMMIT})"))
    with use_engine(fake):
        report = {c.name: c for c in verify_image(plan_for(), "x/app:cpu", fake).checks}
    assert not [c for c in fake.calls if c[0] == "run"]
    assert report["version"].status == "skipped"
    assert report["version"].detail.startswith("linux/arm64 image on a linux/amd64 engine and no binfmt handler")
    assert report["elf-machine"].status == "failed"  # the fake engine saves nothing: its files cannot be read
    (tmp_path / "qemu-aarch64").write_text(QEMU_AARCH64)
    fake.calls.clear()
    with use_engine(fake):
        report = {c.name: c for c in verify_image(plan_for(), "x/app:cpu", fake).checks}
    assert [c[2] for c in fake.calls if c[0] == "run"] == [("/app/llama-server",)]
    assert report["version"].status == "passed"
    assert report["version"].detail.endswith("(emulated: /usr/libexec/qemu-binfmt/aarch64-binfmt-P)")


# ---------------------------------------------------------------- image trees

def tree_of(root: Path, arch: str = "arm64", ld_library_path: str = "/app/lib") -> ImageTree:
    env = ["PATH=/usr/bin"] + ([f"LD_LIBRARY_PATH={ld_library_path}"] if ld_library_path else [])
    return ImageTree(root=root, config={"architecture": arch, "config": {"Env": env}})


@pytest.fixture
def arm_image(tmp_path):
    """An arm64 image's files: /app's program and libraries, libc in the multiarch folder, /lib -> usr/lib
    (usrmerge, an absolute link) and a library reached through an absolute symlink."""
    root = tmp_path / "root"
    lib = root / "usr/lib/aarch64-linux-gnu"
    write_elf(root / "app/llama-server", EM_AARCH64, e_type=2, needed=["libllama.so.0", "libc.so.6"],
              interpreter="/lib/ld-linux-aarch64.so.1")
    write_elf(root / "app/lib/libllama.so.0.0.1", EM_AARCH64, soname="libllama.so.0",
              needed=["libggml.so.0", "libstdc++.so.6"], runpath=["$ORIGIN"])
    os.symlink("libllama.so.0.0.1", root / "app/lib/libllama.so.0")
    write_elf(root / "app/lib/libggml.so.0", EM_AARCH64, soname="libggml.so.0", needed=["libc.so.6"])
    write_elf(lib / "libc.so.6", EM_AARCH64, soname="libc.so.6", needed=["ld-linux-aarch64.so.1"])
    write_elf(lib / "ld-linux-aarch64.so.1", EM_AARCH64, soname="ld-linux-aarch64.so.1")
    write_elf(lib / "libstdc++.so.6.0.30", EM_AARCH64, needed=["libc.so.6"])
    os.symlink("/usr/lib/aarch64-linux-gnu/libstdc++.so.6.0.30", lib / "libstdc++.so.6")
    os.symlink("/usr/lib", root / "lib")
    os.symlink("aarch64-linux-gnu/ld-linux-aarch64.so.1", root / "usr/lib/ld-linux-aarch64.so.1")
    (root / "app/README").write_text("not ELF")
    return root


def test_an_arm64_tree_passes_both_checks(arm_image):
    plan, tree = plan_for(), tree_of(arm_image)
    files = elf_files(tree)
    assert sorted(files.infos) == ["/app/lib/libggml.so.0", "/app/lib/libllama.so.0.0.1", "/app/llama-server"]
    machine = check_elf_machine(plan, tree, files)
    assert machine.status == "passed" and "3 ELF files under /app are AArch64 64-bit" in machine.detail
    needed = check_needed(plan, tree, files)
    assert needed.status == "passed", needed.detail
    found = resolve_in_tree(tree, sorted(files.infos), tree.ld_library_path, ARM_DIRS).libraries
    assert found["libc.so.6"].path == Path("/lib/aarch64-linux-gnu/libc.so.6")  # through the image's /lib link
    assert found["libstdc++.so.6"].path == Path("/lib/aarch64-linux-gnu/libstdc++.so.6")
    assert found["libggml.so.0"].via == "LD_LIBRARY_PATH"


def test_a_host_object_in_app_fails_the_machine_check_by_name(arm_image):
    write_elf(arm_image / "app/lib/libggml-cpu.so", EM_X86_64, needed=["libc.so.6"])
    write_elf(arm_image / "app/lib/libold.so", EM_ARM, elf_class=1)
    (arm_image / "app/lib/libcut.so").write_bytes(elf_bytes(EM_AARCH64)[:30])
    plan, tree = plan_for(), tree_of(arm_image)
    check = check_elf_machine(plan, tree, elf_files(tree))
    assert check.status == "failed"
    assert "/app/lib/libcut.so (unreadable ELF: /app/lib/libcut.so: not an ELF file)" in check.detail
    assert check.detail.startswith("3 of 6 ELF files under /app are not AArch64 64-bit (linux/arm64): ")
    assert "/app/lib/libggml-cpu.so (Advanced Micro Devices X86-64, 64-bit)" in check.detail
    assert "/app/lib/libold.so (e_machine 40, 32-bit)" in check.detail
    assert "\n" not in check.detail


def test_the_config_must_name_the_platform_architecture(arm_image):
    plan, tree = plan_for(), tree_of(arm_image, arch="amd64")
    check = check_elf_machine(plan, tree, elf_files(tree))
    assert check.status == "failed" and "config says architecture amd64, not arm64" in check.detail


def test_a_missing_library_is_named_with_the_object_that_needs_it(arm_image):
    (arm_image / "app/lib/libggml.so.0").unlink()
    plan, tree = plan_for(), tree_of(arm_image)
    check = check_needed(plan, tree, elf_files(tree))
    assert check.status == "failed"
    assert check.detail.startswith("1 library not found in the image (LD_LIBRARY_PATH=/app/lib and /lib/aarch64")
    assert check.detail.endswith("libggml.so.0 (needed by /app/lib/libllama.so.0.0.1)")


def test_a_program_whose_interpreter_is_not_in_the_image_fails(arm_image):
    assert elf_files(tree_of(arm_image)).infos["/app/llama-server"].interpreter == "/lib/ld-linux-aarch64.so.1"
    (arm_image / "usr/lib/ld-linux-aarch64.so.1").unlink()
    check = check_needed(plan_for(), tree_of(arm_image), elf_files(tree_of(arm_image)))
    assert check.status == "failed"
    assert check.detail.endswith(": /lib/ld-linux-aarch64.so.1 (the interpreter of /app/llama-server)")


def test_a_library_of_another_machine_does_not_count(arm_image):
    lib = arm_image / "usr/lib/aarch64-linux-gnu/libc.so.6"
    lib.write_bytes(elf_bytes(EM_X86_64, soname="libc.so.6"))
    check = check_needed(plan_for(), tree_of(arm_image), elf_files(tree_of(arm_image)))
    assert check.status == "failed" and check.detail.endswith(": libc.so.6 (needed by /app/lib/libggml.so.0)")


def test_absolute_links_never_reach_the_host(tmp_path):
    """/lib -> /usr/lib and a link to /lib/x86_64-linux-gnu/libc.so.6 stay inside the image's root,
    though this host has that file: the image lacks it, so it is missing."""
    root = tmp_path / "root"
    write_elf(root / "app/llama-server", EM_X86_64, e_type=2, needed=["libc.so.6", "libm.so.6"])
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    os.symlink("/usr/lib", root / "lib")
    os.symlink("/lib/x86_64-linux-gnu/libm.so.6", root / "usr/lib/x86_64-linux-gnu/libm.so.6")
    plan, tree = plan_for(platform="linux/amd64"), tree_of(root, arch="amd64", ld_library_path="")
    check = check_needed(plan, tree, elf_files(tree))
    assert check.status == "failed"
    assert "libc.so.6 (needed by /app/llama-server)" in check.detail and "libm.so.6 (needed by" in check.detail
    assert "LD_LIBRARY_PATH=(unset)" in check.detail


def test_rpath_and_runpath_expand_origin_inside_the_image(tmp_path):
    root = tmp_path / "root"
    write_elf(root / "app/bin/tool", EM_AARCH64, e_type=2, needed=["liba.so"], rpath=["$ORIGIN/../priv"])
    write_elf(root / "app/priv/liba.so", EM_AARCH64, needed=["libb.so"])  # inherits the program's rpath
    write_elf(root / "app/priv/libb.so", EM_AARCH64)
    tree = tree_of(root, ld_library_path="")
    found = resolve_in_tree(tree, ["/app/bin/tool"], [], ARM_DIRS).libraries
    assert found["liba.so"].path == Path("/app/bin/../priv/liba.so") and found["liba.so"].via == "rpath"
    assert found["libb.so"].via == "rpath"


def test_only_the_vmm_cuda_build_may_lack_the_driver_library():
    assert expected_absent(plan_for("sm_120", "linux/amd64", **{"build.no_vmm": False})) == {"libcuda.so.1"}
    assert expected_absent(plan_for("sm_120", "linux/amd64", **{"build.no_vmm": True})) == set()
    assert expected_absent(plan_for()) == set()


def test_the_export_writes_app_and_shared_libraries_only():
    assert wanted("app/llama-server") and wanted("app/share/x.json")
    assert wanted("usr/lib/aarch64-linux-gnu/libc.so.6") and wanted("usr/lib/ld-linux-aarch64.so.1")
    assert not wanted("usr/share/doc/libc6/copyright") and not wanted("usr/bin/perl") and not wanted("apple")


def test_verify_reads_app_lib_from_the_built_archive_without_copying_it_out(tmp_path):
    """The CPU backends are found in the image's files as read from the build's OCI archive, the same
    read the ELF checks use: /app/lib is not copied out of the engine again (issue 25: re-read less)."""
    import tarfile

    from test_gpu_run import entry, layer_blob, write_layout

    so = elf_bytes(EM_X86_64, e_type=3)
    layer = layer_blob([entry("app", kind="dir"), entry("app/lib", kind="dir"),
                        entry("app/lib/libggml-cpu.so", so, mode=0o755),
                        entry("app/llama-server", elf_bytes(EM_X86_64, e_type=2), mode=0o755)])
    write_layout(tmp_path / "layout", [layer])
    archive = tmp_path / "image.oci.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "layout", arcname=".")
    fake = FakeEngine()
    with use_engine(fake):
        report = {c.name: c for c in verify_image(plan_for(platform="linux/amd64", **{"build.cpu_level": "x86-64-v3"}),
                                                  "x/app:cpu", fake, archive=archive).checks}
    assert report["cpu-backends"].status == "passed", report["cpu-backends"].detail
    assert "libggml-cpu.so" in report["cpu-backends"].detail
    assert not [c for c in fake.calls if c[0] == "copy_out"]
