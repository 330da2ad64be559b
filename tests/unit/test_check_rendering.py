"""One Check (core/check.py), three renderings that keep each command's words (issue 49 item 5): doctor's
ok/warn/fail lines and JSON (with the fix), verify-image's ok/FAIL lines, verify's JSON (passed/failed/
skipped, no fix); and the one JSON rendering of the CLI (cli/output.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from buildkit.cli.output import emit_json, json_text
from buildkit.core.check import Check, Status
from buildkit.flows.doctor.run import as_json, failed, format_checks
from buildkit.release.verifyimage import line
from buildkit.verify.report import VerifyReport

DOCTOR = [Check("engine", Status.PASSED, "Docker 28.1.1, containerd store", "not shown when ok"),
          Check("registry", Status.WARNED, "not reachable; only a push needs it", "start the registry"),
          Check("disk", Status.FAILED, "12 GB free, need 25", "docker image prune")]


def test_doctor_prints_ok_warn_fail_with_the_fix():
    assert format_checks(DOCTOR) == [
        "ok    engine    Docker 28.1.1, containerd store",
        "warn  registry  not reachable; only a push needs it -> fix: start the registry",
        "fail  disk      12 GB free, need 25 -> fix: docker image prune"]
    assert failed(DOCTOR) == [DOCTOR[2]]


def test_doctor_json_keeps_its_keys_and_words():
    assert json_text(as_json(DOCTOR[:2])) == """{
  "ok": true,
  "checks": [
    {
      "name": "engine",
      "status": "ok",
      "detail": "Docker 28.1.1, containerd store",
      "fix": "not shown when ok"
    },
    {
      "name": "registry",
      "status": "warn",
      "detail": "not reachable; only a push needs it",
      "fix": "start the registry"
    }
  ]
}"""
    assert as_json(DOCTOR)["ok"] is False


def test_verify_image_lines_say_ok_or_FAIL():
    assert line(Check("digest", Status.PASSED, "r/x:1 is sha256:ab")) == "ok  digest: r/x:1 is sha256:ab"
    assert line(Check("lock", Status.FAILED, "no entry\nof it")) == "FAIL  lock: no entry\\nof it"


def test_verify_json_has_name_status_detail_only():
    report = VerifyReport("img", (Check("version", Status.PASSED, "version: 1 (abc)"),
                                  Check("cuda-archs", Status.SKIPPED, "no cuobjdump")))
    assert report.ok and report.failures() == []
    assert [json.dumps(c.to_json()) for c in report.checks] == [
        '{"name": "version", "status": "passed", "detail": "version: 1 (abc)"}',
        '{"name": "cuda-archs", "status": "skipped", "detail": "no cuobjdump"}']
    bad = VerifyReport("img", (Check("no-vmm", Status.FAILED, "needs libcuda.so.1"),))
    assert not bad.ok and bad.failures() == list(bad.checks)


@dataclass(frozen=True)
class _Result:
    value: int

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "twice": [self.value] * 2}


def test_one_json_rendering_of_documents_and_results(capsys):
    assert json_text(_Result(3)) == json.dumps({"value": 3, "twice": [3, 3]}, indent=2)
    emit_json({"b": 1, "a": None})
    assert capsys.readouterr().out == '{\n  "b": 1,\n  "a": null\n}\n'
