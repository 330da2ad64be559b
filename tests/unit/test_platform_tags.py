"""An arm64-only build never shares a tag, a build-key tag or a lock key with the amd64 one (issue 40): the plain
name is the default platform's (or a multi-platform index's), another single platform's is suffixed (cpu-arm64),
as llama.cpp's and ollama's images have it. Older locks keep an arm64 build under cpu/server: read only for arm64."""
import contextlib
import tempfile
from dataclasses import replace

from test_buildx_lock_cli import entry
from test_plan_render import plan_for

from buildkit.plan.tags import artifact_variant, build_key_tag
from buildkit.release.lockfile import Lock, update_lock, write_lock_entry


def test_an_arm64_build_gets_tags_of_its_own():
    amd = plan_for(**{"build.arch": "cpu", "build.platform": "linux/amd64"})
    arm = plan_for(**{"build.arch": "cpu", "build.platform": "linux/arm64"})
    assert [t.split(":")[1] for t in amd.tags] == ["cpu", f"sha-{amd.source.commit[:7]}-cpu",
                                                   build_key_tag(amd.build_key, "cpu")]
    assert [t.split(":")[1] for t in arm.tags] == ["cpu-arm64", f"sha-{arm.source.commit[:7]}-cpu-arm64",
                                                   build_key_tag(arm.build_key, "cpu-arm64")]
    assert not set(amd.tags) & set(arm.tags)
    key = "a" * 64
    assert build_key_tag(key, arm.request.artifact_variant) != build_key_tag(key, amd.request.artifact_variant)


def test_a_server_target_and_a_level_of_one_platform_keep_their_names():
    assert artifact_variant("cpu-full", "linux/arm64") == "cpu-full-arm64"
    assert artifact_variant("cuda13.1-sm120", "linux/arm64") == "cuda13.1-sm120-arm64"
    assert artifact_variant("cpu-neoverse-v2", "linux/arm64", "neoverse-v2") == "cpu-neoverse-v2"  # names arm64
    assert artifact_variant("cpu-native", "linux/arm64", "native") == "cpu-native-arm64"  # either platform's CPU
    assert artifact_variant("cpu", "linux/amd64", "all") == "cpu"


def test_lock_keys_of_the_two_platforms_differ(tmp_path):
    path = tmp_path / "buildkit.lock"
    write_lock_entry(path, entry())
    write_lock_entry(path, entry(platform="linux/arm64", image_digest="sha256:arm"))
    lock = Lock.read(path)
    assert set(lock.builds) == {"cpu/server", "cpu-arm64/server"}
    assert lock.builds["cpu/server"].platform == "linux/amd64"
    found = lock.find("cpu", "server", "linux/arm64")
    assert found is not None and found[1].image_digest == "sha256:arm"


def test_an_old_locks_arm64_entry_is_not_the_amd64_build_and_moves_to_its_key(tmp_path):
    path = tmp_path / "buildkit.lock"
    old = entry(platform="linux/arm64", image_digest="sha256:old-arm")
    update_lock(path, lambda lock: lock.with_entry(old, "cpu/server"))
    lock = Lock.read(path)
    assert lock.find("cpu", "server", "linux/amd64") is None
    assert lock.find("cpu", "server", "linux/arm64") == ("cpu/server", old)
    write_lock_entry(path, replace(old, image_digest="sha256:new-arm"))
    builds = Lock.read(path).builds
    assert set(builds) == {"cpu-arm64/server"} and builds["cpu-arm64/server"].image_digest == "sha256:new-arm"


def test_cli_tags_name_the_arm64_platform(tmp_path):
    """`buildkit tags --arch cpu --platform linux/arm64`, as a user asks: every tag names arm64; none is latest."""
    import os

    from click.testing import CliRunner

    from buildkit.cli.main import main

    env = {k: None for k in os.environ if k.startswith("LLAMA_BUILDKIT_")}
    commit = "905483277823858fdec17ff5c3750451cb1b7cdc"
    out = {}
    for platform in ("linux/amd64", "linux/arm64"):
        with tempfile.TemporaryDirectory(dir=tmp_path) as where, contextlib.chdir(where):
            result = CliRunner().invoke(main, ["tags", "--release", "1.2.3", "--commit", commit, "--arch", "cpu",
                                               "--platform", platform], env=env, catch_exceptions=False)
        out[platform] = [line.split()[0].split(":", 1)[1] for line in result.stdout.splitlines()
                         if line.strip() and not line.startswith("#")]
    assert "cpu" in out["linux/amd64"] and "sha-9054832-cpu" in out["linux/amd64"]
    assert out["linux/arm64"] and all(t.endswith("cpu-arm64") for t in out["linux/arm64"]), out
    assert not set(out["linux/amd64"]) & set(out["linux/arm64"])


def test_an_arch_that_exists_on_arm64_only_keeps_its_plain_name_there(tmp_path):
    """sm_121 (GB10) has no amd64 build to be told apart from: its arm64 image is cuda13.1-sm121, as before."""
    plan = plan_for(**{"build.arch": "sm_121", "build.cuda_version": "13.1"})
    assert plan.request.platform == "linux/arm64"
    assert [t.split(":")[1] for t in plan.tags] == ["cuda13.1-sm121", f"sha-{plan.source.commit[:7]}-cuda13.1-sm121",
                                                    build_key_tag(plan.build_key, "cuda13.1-sm121")]
    path = tmp_path / "buildkit.lock"
    write_lock_entry(path, entry(arch="sm_121", variant="cuda13.1-sm121", platform="linux/arm64"))
    assert set(Lock.read(path).builds) == {"cuda13.1-sm121/server"}
