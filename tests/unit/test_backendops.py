"""gpu-check's reading of test-backend-ops (verify/backendops.py) and its verdict (verify/backendverdict.py).

The recorded runs in tests/unit/data/backendops-*.txt are written here in the exact formats the fork's
tests/test-backend-ops.cpp prints (its console printer's printf strings, colours included): the H200 run
of issue 37 (the ARGMAX sentinel mismatch and the two COUNT_EQUAL cases that use argmax), and a run that
a CUDA error ends before its summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildkit.core.errors import ConfigError
from buildkit.verify.backendops import parse
from buildkit.verify.backendverdict import GpuCheck, judge, known_failures, new_failures

DATA = Path(__file__).parent / "data"
ARGMAX = "ARGMAX(type=f32,ne=[32,513,1,1])"
CE500, CE5000 = "COUNT_EQUAL(type=f32,ne=[4,500,1,1])", "COUNT_EQUAL(type=f32,ne=[4,5000,1,1])"


def argmax_run():
    return parse((DATA / "backendops-cuda-argmax.txt").read_text())


def test_the_h200_run_is_read_into_counts_and_failing_cases_with_their_error_lines():
    run = argmax_run()
    assert (run.passed, run.total, run.backends, run.skipped) == (4, 7, ("CUDA0",), ("CPU",))
    assert run.failed_names == (ARGMAX, CE500, CE5000)
    assert run.failed[0].errors == ("sentinel mismatch: sent_2",)
    assert run.failed[2].errors == ("sentinel mismatch: sent_2 [COUNT_EQUAL] ERR = 0.000800000 > 0.000000100",)
    assert (run.ok_lines, run.not_supported, run.backend_ok, run.complete) == (4, 1, False, True)


def test_unknown_failures_fail_with_one_line_naming_each_case_and_its_error():
    check = judge(argmax_run(), "CUDA0")
    assert not check.ok and check.problem == ""
    line = check.line()
    assert "\n" not in line
    assert line.startswith("gpu-check CUDA0: FAIL 4/7 cases passed, 3 failing: ")
    assert f"{ARGMAX} (sentinel mismatch: sent_2)" in line and CE500 in line and CE5000 in line


def test_known_failures_pass_and_the_report_keeps_saying_they_are_known():
    known = known_failures([f"{ARGMAX}: argmax.cu writes dst[nrows + row] past a plain argmax's end",
                            "COUNT_EQUAL: uses argmax"])
    check = judge(argmax_run(), "CUDA0", known)
    assert check.ok
    assert [f.known for f in check.failing] == ["argmax.cu writes dst[nrows + row] past a plain argmax's end",
                                                "uses argmax", "uses argmax"]
    assert check.line().startswith("gpu-check CUDA0: PASS 4/7 cases passed, 3 known: ")
    assert GpuCheck.from_dict(check.to_dict()) == check


def test_a_known_failure_of_one_case_leaves_the_others_failing():
    check = judge(argmax_run(), "CUDA0", known_failures([f"{CE500}: tracked upstream"]))
    assert not check.ok
    assert [f.case for f in check.unknown] == [ARGMAX, CE5000]
    assert "2 failing: " in check.line() and "1 known: " in check.line()


@pytest.mark.parametrize("entry", ["ARGMAX", "ARGMAX:", f"{ARGMAX}:  ", ": reason"])
def test_a_known_failure_needs_a_case_and_a_reason(entry):
    with pytest.raises(ConfigError, match="needs its reason"):
        known_failures([entry])


def test_a_reason_may_hold_colons_and_a_case_its_own_brackets():
    (k,) = known_failures(["FOO(a=[1,2],b=(3:4)): see: issue 12"])
    assert (k.case, k.reason) == ("FOO(a=[1,2],b=(3:4))", "see: issue 12")
    assert k.matches("FOO(a=[1,2],b=(3:4))") and not k.matches("FOO(a=[1,2],b=(3:5))")


def test_a_run_a_cuda_error_ends_is_no_result_and_says_why():
    check = judge(parse((DATA / "backendops-cuda-crash.txt").read_text()), "CUDA0", exit_code=134)
    assert not check.ok
    assert check.problem == ("test-backend-ops ended before its summary, exit code 134 (SIGABRT) after GATED_DELTA_NET("
                             "type=f32,head_count=4,head_size=64,n_seq_tokens=8,n_seqs=1): "
                             "/src/ggml/src/ggml-cuda/ggml-cuda.cu:96: CUDA error")


def test_a_run_cut_by_its_time_limit_still_counts_and_names_the_cases_that_printed_their_line():
    """An excerpt of the H200 run of the fork's head (docs/gpu-runs/2026-12-05-h200/): gpu_run.py's time limit
    stopped it inside FLASH_ATTN_EXT, after the argmax cases had failed. Not a result, but not 0/0 either."""
    check = judge(parse((DATA / "backendops-h200-timeout.txt").read_text()), "CUDA0", exit_code=124)
    assert not check.ok and check.problem.startswith("test-backend-ops ended before its summary, exit code 124")
    assert (check.passed, check.total) == (19, 22)
    assert [f.case for f in check.failing] == [CE500, CE5000, ARGMAX]
    line = check.line()
    assert "19/22 cases passed; 3 failing: " + CE500 in line and ARGMAX + " (sentinel mismatch: sent_2)" in line


def test_a_backend_this_host_lacks_is_no_result():
    text = ("Testing 1 devices\n\nBackend 1/1: CPU\n  Skipping\n1/1 backends passed\n\x1b[1;32mOK\x1b[0m\n")
    check = judge(parse(text), "CUDA0")
    assert not check.ok and check.problem == "backend CUDA0 was not tested (this host has CPU)"


def test_a_filter_that_matches_nothing_is_no_result():
    text = ("Backend 1/1: CUDA0\n  0/0 tests passed\n  Backend CUDA0: \x1b[1;32mOK\x1b[0m\n"
            "1/1 backends passed\n\x1b[1;32mOK\x1b[0m\n")
    check = judge(parse(text), "CUDA0", ops=("NO_SUCH_OP",))
    assert not check.ok and check.problem == "no case ran for -o NO_SUCH_OP (0 not supported)"


def test_a_case_that_failed_to_allocate_is_taken_from_the_closing_list():
    text = ("Backend 1/1: CUDA0\n  ADD(type=f32): \x1b[1;32mOK\x1b[0m\nfailed to allocate tensors [CUDA0] "
            "  1/2 tests passed\n\nFailing tests:\n  MUL_MAT(type_a=f16,m=65536)\n"
            "  Backend CUDA0: \x1b[1;31mFAIL\x1b[0m\n0/1 backends passed\n\x1b[1;31mFAIL\x1b[0m\n")
    check = judge(parse(text), "CUDA0")
    assert [f.case for f in check.failing] == ["MUL_MAT(type_a=f16,m=65536)"]
    assert check.failing[0].errors == ("failed to allocate tensors [CUDA0]",)
    assert (check.passed, check.total, check.problem) == (1, 2, "")


def test_grad_mode_errors_after_the_case_name_are_kept():
    text = ("Backend 1/1: CPU\n  SIN(type=f32,ne=[10,2,2,2]): [SIN] MAA = 0.100000000 > 0.000100000 "
            "\x1b[1;31mFAIL\x1b[0m\n  COS(type=f32): \x1b[1;32mOK\x1b[0m\n  1/2 tests passed\n"
            "  Backend CPU: \x1b[1;31mFAIL\x1b[0m\n0/1 backends passed\n\x1b[1;31mFAIL\x1b[0m\n")
    check = judge(parse(text), "CPU")
    assert [(f.case, f.errors) for f in check.failing] == [
        ("SIN(type=f32,ne=[10,2,2,2])", ("[SIN] MAA = 0.100000000 > 0.000100000",))]


def test_the_gate_refuses_only_failures_the_release_did_not_have():
    nightly = judge(argmax_run(), "CUDA0", known_failures([f"{CE5000}: flaky on small GPUs"]))
    release_text = (DATA / "backendops-cuda-argmax.txt").read_text().replace(
        "sentinel mismatch: sent_2   ARGMAX", "  ARGMAX").replace(f"  {ARGMAX}\n", "")
    release_text = release_text.replace(f"{ARGMAX}: \x1b[1;31mFAIL", f"{ARGMAX}: \x1b[1;32mOK")
    release = judge(parse(release_text.replace("4/7 tests", "5/7 tests")), "CUDA0")
    assert [f.case for f in new_failures(nightly, release)] == [ARGMAX]
    assert [f.case for f in new_failures(nightly, None)] == [ARGMAX, CE500]
    assert new_failures(release, release) == ()


@pytest.mark.parametrize("arch", ["cpu", "sm_90"])
def test_the_tests_stages_are_rendered_and_no_image_target_depends_on_them(arch):
    import re

    from buildkit.plan.render import render_dockerfile
    from test_plan_render import plan_for

    text = render_dockerfile(plan_for(**{"build.arch": arch}))
    tests_build = text[text.index("FROM build AS tests-build"):]
    assert "-DLLAMA_BUILD_TESTS=ON" in tests_build and "--target test-backend-ops" in tests_build
    assert "--mount=type=cache,id=llama-buildkit-ccache-" in tests_build  # the build stage's own ccache
    assert re.search(r"^FROM server AS tests$", text, re.M)
    before = text[:text.index("FROM build AS tests-build")]
    assert "tests-build" not in before and "-DLLAMA_BUILD_TESTS=OFF" in before  # the image's compile has no tests


def test_the_tests_image_tag_follows_the_image_tag():
    from buildkit.flows.unit.testsimage import tests_tag

    assert tests_tag("buildkit-test/tiny-fork:cpu") == "buildkit-test/tiny-fork:cpu-tests"
    assert tests_tag("localhost:5000/x") == "localhost:5000/x:latest-tests"


def test_the_tests_image_goes_to_the_registry_under_the_build_key_tag_only_and_for_every_cuda_variant():
    """Published, the tests image's one tag is the image's build-key tag with -tests (issue 46): never a release
    tag. A nightly unit builds it for every CUDA variant, and for a cpu variant only when the gate tests the
    CPU backend (its image has no other)."""
    from buildkit.flows.unit.testsimage import builds_tests, registry_tests_tag
    from buildkit.plan.archs import get_arch
    from buildkit.plan.tags import build_key_tag

    key = "ab" * 32
    assert registry_tests_tag(key, "cuda13.1-sm120") == build_key_tag(key, "cuda13.1-sm120") + "-tests" \
        == f"bk-{key[:24]}-cuda13.1-sm120-tests"
    assert builds_tests(get_arch("sm_120"), "CUDA0") and builds_tests(get_arch("sm_90"), "CPU")
    assert builds_tests(get_arch("cpu"), "CPU") and not builds_tests(get_arch("cpu"), "CUDA0")


def test_gpu_check_judges_a_recorded_log_with_the_projects_known_failures_and_compares(tmp_path, monkeypatch):
    """`buildkit gpu-check --log` (the log gpu_run.py backend-ops wrote on a GPU host): the verdict line first,
    the config's known failures, --compare with a release, and a bad release file as one error line."""
    from click.testing import CliRunner

    from buildkit.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LLAMA_BUILDKIT_CONFIG", raising=False)
    (tmp_path / "buildkit.toml").write_text('schema_version = 1\n[gpu_check]\n'
                                            'known_failures = ["COUNT_EQUAL: uses argmax"]\n')
    log = str(DATA / "backendops-cuda-argmax.txt")
    runner = CliRunner()
    got = runner.invoke(main, ["gpu-check", "--log", log, "--json", "nightly.json"])
    assert got.exit_code == 1
    assert got.output.splitlines()[0].startswith(f"gpu-check CUDA0: FAIL 4/7 cases passed, 1 failing: {ARGMAX} ")
    assert "2 known: " in got.output
    got = runner.invoke(main, ["gpu-check", "--log", log, "--compare", "nightly.json"])  # nothing new
    assert got.exit_code == 0 and "new failing cases (not in the release, not known): none" in got.output
    (tmp_path / "bad.json").write_text("[1, 2]")
    got = runner.invoke(main, ["gpu-check", "--log", log, "--compare", "bad.json"])
    assert got.exit_code == 1 and got.output.splitlines()[-1].startswith("error: --compare bad.json: not a gpu-check")
