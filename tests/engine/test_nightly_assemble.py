"""`buildkit nightly --assemble` against the loopback registry, without an engine: the jobs' images
(small OCI images pushed here by digest under their build-key tags, as `--job` leaves them) get
their multi-platform index and the nightly tags through the registry API; a variant with a failed
platform keeps its old tags."""

from __future__ import annotations

import json

from buildkit.oci.ocilayout import OCI_INDEX, sha256_digest
from buildkit.oci.registry import RegistryClient
from cliutil import cli_env, run_cli, write_project
from registryserver import head_digest

REPO = "assemble/tiny"
COMMIT = "a" * 40
VERSION = "0.1.0-nightly.20261202"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def push_image(client: RegistryClient, arch: str, tag: str, repo: str = REPO) -> str:
    """A one-layer image for linux/<arch> under tag; its manifest digest."""
    layer = f"layer of {arch}".encode()
    config = json.dumps({"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": []},
                         "config": {"Labels": {"org.opencontainers.image.revision": COMMIT}}}).encode()
    for blob in (layer, config):
        client.upload_blob(repo, sha256_digest(blob), blob, len(blob))
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": sha256_digest(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                       "digest": sha256_digest(layer), "size": len(layer)}]}).encode()
    return client.put_manifest(repo, tag, manifest, OCI_MANIFEST)


def entry(variant: str) -> dict:
    return {"variant": variant, "arch": "cpu", "cuda_version": None, "target": "server", "build": True,
            "reason": "new commit", "previous": None}


def unit(variant: str, platform: str) -> dict:
    uid = f"{variant}_{platform.replace('/', '_')}"
    return {"id": uid, "unit": f"{variant}@{platform}", "variant": variant, "platform": platform, "split": True,
            "runner": "ubuntu-latest", "reason": "new commit"}


def plan_of(host: str, units: list[dict]) -> dict:
    """plan.json as `nightly --plan` writes it (flows/nightly/plan.py NightlyPlan)."""
    return {"plan_version": 1, "repository": f"{host}/{REPO}", "url": "git://127.0.0.1/f", "branch": "master",
            "date": "20261202", "commit": COMMIT, "old_commit": None, "patch_set_sha256": "p", "version": VERSION,
            "build": True, "excluded": [], "variants": [entry("cpu"), entry("cpu-light")],
            "matrix": {"include": units}}


def test_assemble_makes_the_index_and_the_nightly_tags_from_the_jobs_digests(tmp_path, registry_plain):
    project = write_project(tmp_path / "project", image={"name": f"{registry_plain.host}/{REPO}"})
    results = tmp_path / "results"
    results.mkdir()
    units = [unit(v, p) for v in ("cpu", "cpu-light") for p in ("linux/amd64", "linux/arm64")]
    with RegistryClient(registry_plain.host) as client:
        for u in units:
            digest = push_image(client, u["platform"].split("/")[1], f"bk-{u['id']}")
            failed = u["variant"] == "cpu-light" and u["platform"] == "linux/arm64"
            (results / f"{u['id']}.json").write_text(json.dumps(  # as `nightly --job` writes it (JobResult)
                {"result_version": 2, "id": u["id"], "unit": u["unit"], "variant": u["variant"],
                 "platform": u["platform"], "commit": COMMIT, "version": VERSION,
                 "status": "failed" if failed else "passed", "built": not failed, "digest": "" if failed else digest,
                 "build_key": u["id"] * 2, "tag": f"bk-{u['id']}", "error": "the compile failed" if failed else "",
                 "build_seconds": 12.5, "checks": [], "tests_tag": "", "tests_digest": ""}))
    (results / "plan.json").write_text(json.dumps(plan_of(registry_plain.host, units)))
    step_summary = tmp_path / "step-summary.md"
    proc = run_cli(project, "nightly", "--assemble", str(results), "--summary", str(tmp_path / "summary.json"),
                   "--bench-gate", "none", env=cli_env(tmp_path / "cache", GITHUB_STEP_SUMMARY=str(step_summary)))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # cpu-light failed
    summary = json.loads((tmp_path / "summary.json").read_text())
    variants = {v["variant"]: v for v in summary["variants"]}
    assert variants["cpu"]["status"] == "passed"
    assert variants["cpu-light"]["status"] == "failed" and "the compile failed" in variants["cpu-light"]["error"]
    assert "| `cpu-light` | failed" in step_summary.read_text()
    # no GPU runner in the workflow (`ci github` without --bench-runner passes --bench-gate none): it says so
    no_gate = "bench gate: none (no GPU runner configured; nightlies are not promoted automatically)"
    assert summary["bench_gate"] == no_gate and f"- {no_gate}" in step_summary.read_text()
    assert no_gate in proc.stdout
    with RegistryClient(registry_plain.host) as client:
        body, media_type, digest = client.get_manifest(REPO, "nightly-cpu")
        assert media_type == OCI_INDEX and digest == variants["cpu"]["digest"] == sha256_digest(body)
        index = json.loads(body)
        listed = [(m["platform"]["architecture"], m["digest"]) for m in index["manifests"]]
        assert listed == [("amd64", head_digest(client, REPO, "bk-cpu_linux_amd64")),
                          ("arm64", head_digest(client, REPO, "bk-cpu_linux_arm64"))]
        assert head_digest(client, REPO, f"{VERSION}-cpu") == digest
        bk = [t for t in variants["cpu"]["tags"] if t.startswith("bk-")]
        assert len(bk) == 1 and head_digest(client, REPO, bk[0]) == digest
        assert client.head_manifest(REPO, "nightly-cpu-light") is None  # a failed platform: no tags
        assert client.head_manifest(REPO, f"{VERSION}-cpu-light") is None
    # the same night assembled again (a re-run of the job) moves nothing and fails nothing new
    again = run_cli(project, "nightly", "--assemble", str(results), "--summary", str(tmp_path / "again.json"),
                    "--bench-gate", "cpu", env=cli_env(tmp_path / "cache"))
    assert json.loads((tmp_path / "again.json").read_text())["variants"][0]["changed_tags"] == []
    assert json.loads((tmp_path / "again.json").read_text())["bench_gate"] == \
        "bench gate: cpu not benched: the nightly has failed variants; nothing promoted"
    assert again.returncode == 1, again.stderr


def test_a_bench_gate_that_names_no_variant_is_refused_before_anything_runs(tmp_path):
    project = write_project(tmp_path / "project", image={"name": f"127.0.0.1:9/{REPO}"})
    (tmp_path / "plan.json").write_text(json.dumps(plan_of("127.0.0.1:9", [])))
    for args, message in ((("--assemble", str(tmp_path), "--bench-gate", "full"),
                           "--bench-gate 'full' is neither none nor a variant of the plan (cpu, cpu-light)"),
                          (("--bench-gate", "none"), "--bench-gate goes with --assemble")):
        proc = run_cli(project, "nightly", *args, env=cli_env(tmp_path / "cache"))
        assert proc.returncode == 1 and proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


GATE_REPO = "assemble/gate"


def push_labelled(client: RegistryClient, tag: str, labels: dict[str, str], payload: str) -> str:
    """A one-layer linux/amd64 image with these labels under tag; its manifest digest."""
    layer = payload.encode()
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []},
                         "config": {"Labels": labels}}).encode()
    for blob in (layer, config):
        client.upload_blob(GATE_REPO, sha256_digest(blob), blob, len(blob))
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": sha256_digest(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                       "digest": sha256_digest(layer), "size": len(layer)}]}).encode()
    return client.put_manifest(GATE_REPO, tag, manifest, OCI_MANIFEST)


def test_assemble_hands_the_gate_the_nightlys_and_the_releases_tests_images_by_digest(tmp_path, registry_plain):
    """`--assemble --bench-gate cpu` (issue 46): the outputs `tests` (the tests image the cpu job pushed, checked to
    name tonight's image) and `release_tests` (the release's, found through its build-key label as
    bk-<key>-cpu-tests and checked to name the release); a tests image that names another image is not used."""
    from buildkit.flows.unit.testsimage import TESTS_LABEL

    host = registry_plain.host
    name = f"{host}/{GATE_REPO}"
    project = write_project(tmp_path / "project", image={"name": name})
    old_key, new_key = "0" * 64, "1" * 64
    with RegistryClient(host) as client:
        release = push_labelled(client, "cpu", {"org.llama-buildkit.build-key": old_key}, "release")
        released = push_labelled(client, f"bk-{old_key[:24]}-cpu-tests", {TESTS_LABEL: release}, "release tests")
        nightly = push_labelled(client, f"bk-{new_key[:24]}-cpu", {"org.llama-buildkit.build-key": new_key}, "new")
        tests = push_labelled(client, f"bk-{new_key[:24]}-cpu-tests", {TESTS_LABEL: nightly}, "new tests")
        stray = push_labelled(client, "stray-tests", {TESTS_LABEL: release}, "tests of another image")
    cpu = {"id": "cpu", "unit": "cpu", "variant": "cpu", "platform": "linux/amd64", "split": False,
           "runner": "ubuntu-latest", "reason": "new commit"}
    plan = dict(plan_of(host, [cpu]), variants=[entry("cpu")], repository=name)

    def assemble(tests_digest: str, name: str) -> tuple[dict, dict[str, str], str]:
        results = tmp_path / name
        results.mkdir()
        (results / "plan.json").write_text(json.dumps(plan))
        (results / "cpu.json").write_text(json.dumps(
            {"result_version": 2, "id": "cpu", "unit": "cpu", "variant": "cpu", "platform": "linux/amd64",
             "commit": COMMIT, "version": VERSION, "status": "passed", "built": True, "digest": nightly,
             "build_key": new_key, "tag": f"bk-{new_key[:24]}-cpu", "build_seconds": 1.0, "checks": [], "error": "",
             "tests_tag": f"bk-{new_key[:24]}-cpu-tests", "tests_digest": tests_digest}))
        outputs = tmp_path / f"{name}.outputs"
        proc = run_cli(project, "nightly", "--assemble", str(results), "--summary", str(tmp_path / f"{name}.json"),
                       "--bench-gate", "cpu", env=cli_env(tmp_path / "cache", GITHUB_OUTPUT=str(outputs)))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        written = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
        return json.loads((tmp_path / f"{name}.json").read_text())["variants"][0], written, proc.stderr

    variant, outputs, log = assemble(tests, "good")
    assert outputs["tests"] == variant["tests"] == f"{name}@{tests}"
    assert outputs["release_tests"] == f"{name}@{released}"
    assert f"gate: nightly-cpu: {name}@{tests}" in log and f"gate: release cpu: {name}@{released}" in log

    # a job result naming a tests image made with another image: not handed to the gate, and the summary says so
    variant, outputs, log = assemble(stray, "stray")
    assert outputs["tests"] == variant["tests"] == "" and variant["status"] == "passed"
    assert variant["error"] == (f"no tests image: {name}@{stray[:19]} was made with {release[:19]}, "
                                f"not {nightly[:19]}")
    # the release's tests tag moved to an image whose label is no digest: the release is judged to have none, and
    # the label is not printed
    with RegistryClient(host) as client:
        hostile = push_labelled(client, f"bk-{old_key[:24]}-cpu-tests", {TESTS_LABEL: "\x1b[2J" + release}, "x")
    variant, outputs, log = assemble(tests, "moved")
    assert outputs == {"published": outputs["published"], "tests": f"{name}@{tests}", "release_tests": ""}
    assert (f"gate: release cpu: no tests image: {name}@{hostile[:19]} was made with no image (its "
            f"{TESTS_LABEL} label is not a digest), not {release[:19]}") in log and "\x1b" not in log


def test_with_a_key_assemble_tags_only_what_the_jobs_signed(tmp_path, registry_plain):
    """Issue 48: a job's result names a digest; with the signing key, assemble tags (and signs an index over)
    only an image that key signed with a provenance of the plan's commit and version and the job's build key.
    cpu's job signed its image; cpu-light's digest names an image nobody signed: it fails, and gets no tag."""
    from buildkit.release.provenance import BUILD_TYPE, PREDICATE_TYPE
    from buildkit.release.cosignformat import Attestation
    from buildkit.release.signing import sign_image
    from buildkit.release.signkeys import generate_keys, load_signing_key

    generate_keys(tmp_path / "k.key", tmp_path / "k.pub")
    key = load_signing_key(tmp_path / "k.key", env={})
    assert key is not None
    project = write_project(tmp_path / "project", image={"name": f"{registry_plain.host}/{REPO}-signed"})
    results = tmp_path / "results"
    results.mkdir()
    units = [dict(unit(v, "linux/amd64"), split=False) for v in ("cpu", "cpu-light")]
    with RegistryClient(registry_plain.host) as client:
        for u, arch in zip(units, ("amd64", "arm64"), strict=True):  # two images: another layer each
            digest = push_image(client, arch, f"bk-{u['id']}", repo=f"{REPO}-signed")
            if u["variant"] == "cpu":
                statement = {"_type": "https://in-toto.io/Statement/v1", "predicateType": PREDICATE_TYPE,
                             "subject": [{"name": "x", "digest": {"sha256": digest.split(":")[1]}}],
                             "predicate": {"buildDefinition": {
                                 "buildType": BUILD_TYPE, "externalParameters": {"commit": COMMIT, "version": VERSION},
                                 "internalParameters": {"build_key": u["id"] * 2}, "resolvedDependencies": []}}}
                sign_image(client, f"{REPO}-signed", digest, key,
                           [Attestation(PREDICATE_TYPE, json.dumps(statement).encode())])
            (results / f"{u['id']}.json").write_text(json.dumps(
                {"result_version": 2, "id": u["id"], "unit": u["unit"], "variant": u["variant"],
                 "platform": u["platform"], "commit": COMMIT, "version": VERSION, "status": "passed", "built": True,
                 "digest": digest, "build_key": u["id"] * 2, "tag": f"bk-{u['id']}", "error": "",
                 "build_seconds": 1.0, "checks": [], "tests_tag": "", "tests_digest": ""}))
    plan = plan_of(registry_plain.host, units)
    plan["repository"] = f"{registry_plain.host}/{REPO}-signed"
    (results / "plan.json").write_text(json.dumps(plan))
    proc = run_cli(project, "nightly", "--assemble", str(results), "--summary", str(tmp_path / "summary.json"),
                   "--bench-gate", "none", "--sign-key", str(tmp_path / "k.key"), env=cli_env(tmp_path / "cache"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    variants = {v["variant"]: v for v in json.loads((tmp_path / "summary.json").read_text())["variants"]}
    assert variants["cpu"]["status"] == "passed", variants["cpu"]
    assert variants["cpu-light"]["status"] == "failed"
    assert "which this project did not publish" in variants["cpu-light"]["error"]
    assert "no signature of" in variants["cpu-light"]["error"]
    with RegistryClient(registry_plain.host) as client:
        assert client.head_manifest(f"{REPO}-signed", "nightly-cpu") is not None
        assert client.head_manifest(f"{REPO}-signed", "nightly-cpu-light") is None
        assert client.head_manifest(f"{REPO}-signed", f"{VERSION}-cpu-light") is None
