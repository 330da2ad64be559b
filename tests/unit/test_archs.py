import re

import pytest

from buildkit.plan.archs import ARCHS, arch_table, check_cuda_support, get_arch, parse_cuda_version
from buildkit.core.errors import ArchError


def test_catalogue_has_every_required_arch():
    assert list(ARCHS) == ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120",
                          "sm_121", "cpu"]


@pytest.mark.parametrize("name,cmake,elf", [
    ("sm_120", "120a-real", "sm_120a"), ("sm_121", "121a-real", "sm_121a"),
    ("sm_89", "89-real", "sm_89"), ("sm_86", "86-real", "sm_86"),
])
def test_cmake_and_elf_strings(name, cmake, elf):
    arch = get_arch(name)
    assert (arch.cmake_archs, arch.elf_arch) == (cmake, elf)


@pytest.mark.parametrize("spelling", ["sm_120", "SM_120", "sm120", "120"])
def test_spellings(spelling):
    assert get_arch(spelling).name == "sm_120"


@pytest.mark.parametrize("name,minimum", [
    ("sm_86", (11, 1)), ("sm_89", (11, 8)), ("sm_90", (11, 8)), ("sm_100", (12, 8)),
    ("sm_120", (12, 8)), ("sm_121", (12, 9)), ("sm_103", (12, 9)), ("sm_110", (13, 0)),
])
def test_minimum_cuda_versions(name, minimum):
    arch = get_arch(name)
    assert arch.min_cuda == minimum
    check_cuda_support(arch, f"{minimum[0]}.{minimum[1]}")
    below = f"{minimum[0]}.{minimum[1] - 1}" if minimum[1] else f"{minimum[0] - 1}.9"
    with pytest.raises(ArchError, match=rf"needs CUDA {minimum[0]}\.{minimum[1]} or newer"):
        check_cuda_support(arch, below)


def test_sm86_with_cuda_11_0_is_refused_with_the_minimum():
    with pytest.raises(ArchError) as info:
        check_cuda_support(get_arch("sm_86"), "11.0")
    assert "11.1" in str(info.value) and "\n" not in str(info.value)


def test_unknown_arch_names_the_choices():
    with pytest.raises(ArchError) as info:
        get_arch("sm_99")
    message = str(info.value)
    assert "sm_99" in message and "sm_120" in message and "cpu" in message


def test_cpu_needs_no_cuda():
    cpu = get_arch("cpu")
    assert not cpu.is_cuda
    check_cuda_support(cpu, "1.0")


@pytest.mark.parametrize("text", ["13", "13.1.0", "x.y", ""])
def test_bad_cuda_version(text):
    with pytest.raises(ArchError, match="MAJOR.MINOR"):
        parse_cuda_version(text)


def test_table_rows():
    rows = {r["arch"]: r for r in arch_table()}
    assert rows["sm_120"]["cmake"] == "120a-real" and rows["sm_120"]["min CUDA"] == "12.8"
    assert rows["cpu"]["cmake"] == "-"


# ---------------------------------------------------------------- the CUDA catalogue (issue 22)

@pytest.mark.parametrize("version", ["99.9", "12.7", "9.2", "0.0", "15.0"])
def test_a_cuda_version_outside_the_catalogue_stops_before_any_work(version):
    """--cuda 99.9 is one line from make_request (the first step of every build), not a missing base
    image after a DNS lookup; the matrix refuses it the same way."""
    from buildkit.plan.buildplan import make_request
    from buildkit.plan.config import load_config
    from buildkit.plan.matrix import matrix_variants

    cfg = load_config(None, env={}, overrides={"build.cuda_version": (version, "--cuda")})
    with pytest.raises(ArchError, match=rf"CUDA {re.escape(version)} is not a CUDA release buildkit knows") as info:
        make_request(cfg)
    assert "\n" not in str(info.value) and "--cuda" in str(info.value)
    matrix = load_config(None, env={}, overrides={"matrix.cuda_versions": (["13.1", version], "t")})
    with pytest.raises(ArchError, match="matrix.cuda_versions"):
        matrix_variants(matrix)


def test_every_release_of_the_catalogue_is_accepted():
    from buildkit.plan.archs import CUDA_RELEASES, check_cuda_release

    assert "13.1" in [f"{a}.{b}" for a, b in CUDA_RELEASES] and (12, 7) not in CUDA_RELEASES
    for major, minor in CUDA_RELEASES:
        assert check_cuda_release(f"{major}.{minor}") == (major, minor)


@pytest.mark.parametrize("version", ["13.3", "13.4", "13.5", "13.9", "14.0"])
def test_a_release_newer_than_the_catalogue_is_the_providers_to_judge(version):
    """NVIDIA ships 13.3 to 13.5 after the list was written: make_request takes them (and any newer 13.x or
    14.x); the provider says whether it exists (tests/test_cuda_index.py), not a frozen list."""
    from buildkit.plan.buildplan import make_request
    from buildkit.plan.config import load_config

    cfg = load_config(None, env={}, overrides={"build.cuda_version": (version, "--cuda"),
                                               "build.arch": ("sm_120", "t")})
    assert make_request(cfg).cuda_version == version
