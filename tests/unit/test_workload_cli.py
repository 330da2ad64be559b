"""`buildkit workload-check --result`: a GPU host's recorded report judged here, without an engine."""

from __future__ import annotations

import json
from pathlib import Path

from cliutil import run_cli


def test_a_recorded_report_that_differs_fails_in_one_line(tmp_path: Path):
    """A GPU host's workload.json with a clear difference: judged here, exit 1, the position named."""
    report = {"lossless": [{"label": "medium f16", "comparisons": [
        {"prompt": 1, "setting": "sequence", "compared": 17, "outcome": "near-tie",  # the host's word, overruled
         "divergence": {"position": 17, "target": 42, "speculative": 7, "margin": 3.25, "target_second": 7}}]}]}
    (tmp_path / "workload.json").write_text(json.dumps(report))
    (tmp_path / "buildkit.toml").write_text("schema_version = 1\n")
    proc = run_cli(tmp_path, "workload-check", "--result", str(tmp_path / "workload.json"), timeout=120)
    assert proc.returncode == 1
    assert ("prompt 1 (sequence): DIFFERS at token 17" in proc.stdout
            or "lossless medium f16: FAIL 0/1 identical, 1 DIFFER" in proc.stdout), proc.stdout
    assert "Traceback" not in proc.stderr


def test_no_image_and_no_result_is_one_line(tmp_path: Path):
    (tmp_path / "buildkit.toml").write_text("schema_version = 1\n")
    proc = run_cli(tmp_path, "workload-check", timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "error: workload-check needs an IMAGE to run, or --result FILE to judge"], proc.stderr


def test_a_result_that_is_not_a_report_is_one_line(tmp_path: Path):
    (tmp_path / "buildkit.toml").write_text("schema_version = 1\n")
    (tmp_path / "w.json").write_text(json.dumps({"lossless": [{"comparisons": [{"setting": "fresh"}]}]}))
    proc = run_cli(tmp_path, "workload-check", "--result", str(tmp_path / "w.json"), timeout=120)
    assert proc.returncode == 1 and "not a workload report" in proc.stderr and "Traceback" not in proc.stderr


def test_a_recorded_verdict_stays_a_lock_entry_buildkit_reads(tmp_path: Path):
    """workload-check --attach-lock writes builds[KEY].workload; every later reader of that entry (push, reproduce,
    verify-image) takes it as a LockEntry, which refused an unknown key before the field existed."""
    from test_buildx_lock_cli import entry

    from buildkit.release.lock import entry_from_dict
    from buildkit.release.lockfile import write_lock_entry

    (tmp_path / "buildkit.toml").write_text("schema_version = 1\n")
    write_lock_entry(tmp_path / "buildkit.lock", entry())
    report = {"lossless": [{"label": "m", "comparisons": [
        {"prompt": 0, "setting": "fresh", "compared": 8, "outcome": "identical", "divergence": None}]}]}
    (tmp_path / "w.json").write_text(json.dumps(report))
    proc = run_cli(tmp_path, "workload-check", "--result", str(tmp_path / "w.json"), "--attach-lock",
                   "--lock-entry", "cpu/server", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "buildkit.lock").read_text())["builds"]["cpu/server"]
    assert data["workload"]["passed"] is True
    assert entry_from_dict(data).workload == data["workload"]
    write_lock_entry(tmp_path / "buildkit.lock", entry())  # a rebuild's entry: no record of the last image's checks
    assert "workload" not in json.loads((tmp_path / "buildkit.lock").read_text())["builds"]["cpu/server"]
