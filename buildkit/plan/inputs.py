"""What a build is made of (pure): one model, `BuildInputs`, each input declared once.

Every field of `BuildInputs` is one input and carries its declaration (`given(...)`): where its value
comes from, the image label that carries it, whether the inputs label's JSON holds it, whether it is a
field of a lock entry, its name among the build key's fields, the config key reproduce sets from it,
and its name in errors; its type is its annotation. `INPUTS` is those declarations, and every form of
a build's inputs is a loop over them:

* the image labels: `to_labels`, the one label writer (OCI and org.llama-buildkit.* labels, the
  inputs label: JSON of what no other label carries; each label's text: plan/labelforms.py);
  `from_labels` reads them back into an equal model;
* the inputs label's type checks (each key's annotation);
* the build key's fields (buildkey.py `key_fields`);
* a lock entry's input fields (`lock_fields`; release/lock.py's LockEntry declares them, with what the
  build produced; tests/unit/test_lock_types.py holds them to `INPUTS`), read back by `from_lock_entry`;
* reproduce's config overrides (cli/reproducespecs.py `overrides_for`); its record holds a model.

A new input is one field here (and, when it comes from the config, its config key and its field of
BuildRequest). An input added after images and locks existed is `later`: every form leaves it out while
it is None or "", so the keys, labels and records of builds without it do not change.

Its `of` also says whether the config decides it, before any source is fetched (the inputs a quiet
`buildkit nightly` compares, plan/configinputs.py): "request.x", "tool.x" (this buildkit's version
and templates) and functions declared `ByConfig` (of the request and the source's URL only) do, unless
`per_build` (the version: a new one for every build); "source.x", "made.x", other functions and None do not.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from buildkit.core.errors import InputsError
from buildkit.plan.labelforms import CREATED, FLAGS, NONE_WORD, NUMBER, TEXT, LabelForm
from buildkit.plan.request import BuildRequest, SourceFacts
from buildkit.plan.schema import JSON_TYPES, JsonType, is_strings

if TYPE_CHECKING:
    InputFunction = Callable[[BuildRequest, SourceFacts, "_Made"], Any]  # Input.of: a function of request, source, made

LABEL_PREFIX = "org.llama-buildkit."
OCI = "org.opencontainers.image."
BUILD_KEY_LABEL = LABEL_PREFIX + "build-key"
INPUTS_LABEL = LABEL_PREFIX + "inputs"
INPUTS_FORMAT = 1


@dataclass(frozen=True)
class BaseImage:
    ref: str
    digest: str  # repo digest where known, else the local image id, else ""


@dataclass(frozen=True)
class Kind(JsonType):
    """A type of input in JSON (the inputs label, the build key): the check and its words, the conversions."""
    to_json: Callable[[Any], Any] = lambda v: v
    from_json: Callable[[Any], Any] = lambda v: v


def _kind(name: str, *conversions: Callable[[Any], Any]) -> Kind:
    return Kind(JSON_TYPES[name].expect, JSON_TYPES[name].ok, *conversions)  # the schema's one type check


KINDS = {  # by annotation ("X | None": the same kind, null allowed)
    "str": _kind("str"), "int": _kind("int"), "bool": _kind("bool"),
    "tuple[str, ...]": _kind("tuple[str, ...]", list, tuple),
    "tuple[BaseImage, ...]": Kind("a list of [ref, digest] pairs",
                                  lambda v: isinstance(v, list) and all(isinstance(p, list) and len(p) == 2
                                                                        and is_strings(p) for p in v),
                                  lambda bases: [[b.ref, b.digest] for b in bases],
                                  lambda pairs: tuple(BaseImage(*p) for p in pairs)),
}


# --------------------------------------------------------------------------- the declarations

NEEDED = type("Needed", (), {"__repr__": lambda self: "NEEDED"})()  # no default: a value must be recorded


@dataclass(frozen=True)
class Input:
    """One input of a build, declared once: a field of BuildInputs and its `given(...)`."""
    name: str
    annotation: str  # its type: KINDS says how its JSON is checked and written
    of: str | InputFunction | None  # where request_inputs takes it: "request.x", "source.x", "tool.x", "made.x",
    #      or a function of request, source, made (ByConfig: of the config); None: known once base images are resolved
    label: str | None = None  # the image label that carries it
    form: LabelForm = TEXT  # how the label's text is written and read
    record: bool = False  # a key of the inputs label's JSON (by its name)
    lock: bool = False  # a field of a lock entry (by its name)
    lock_default: Any = NEEDED  # what locks written before it existed hold
    key: str | None = None  # its name among the build key's fields
    config: str | None = None  # the config key reproduce sets from it
    absent: Any = NEEDED  # its value where a record lacks it (NEEDED: the error names `what`)
    what: str = ""
    later: bool = False  # added after builds were recorded: left out of every form while None or ""
    per_build: bool = False  # chosen anew for every build (the version), though the config may give it

    @property
    def kind(self) -> Kind:
        return KINDS[self.annotation.removesuffix(" | None")]

    def left_out(self, value: Any) -> bool:
        return self.later and value in (None, "")

    def json(self, value: Any) -> Any:
        return None if value is None else self.kind.to_json(value)


def given(of: str | InputFunction | None, *, default: Any = MISSING, **declaration: Any) -> Any:
    """A field of BuildInputs with its declaration (Input's fields)."""
    return field(default=default, metadata={"input": dict(of=of, **declaration)})


@dataclass(frozen=True)
class ByConfig:
    """An input's `of` that the config decides: a function of the request and the source's URL only."""
    read: Callable[[BuildRequest, str], Any]

    def __call__(self, request: BuildRequest, source: SourceFacts, made: _Made) -> Any:
        return self.read(request, source.url)


def _fill(text: str, request: BuildRequest, url: str) -> str:
    """A config text's {source}, {variant} and {target} (image.description, image.url)."""
    return text.replace("{source}", url).replace("{variant}", request.variant).replace("{target}", request.target)


@dataclass(frozen=True)
class BuildInputs:
    """Every input of one build: what decides the image's content, and the options that shape it."""
    source_url: str = given(ByConfig(lambda request, url: url), label=OCI + "source", lock=True, config="source.url",
                            what="source URL")
    commit: str = given("source.commit", label=OCI + "revision", lock=True, key="commit", config="source.commit",
                        what="commit")
    version: str = given("request.version", label=OCI + "version", lock=True, lock_default="",
                         config="image.version", what="version", per_build=True)
    source_date_epoch: int = given("source.commit_time", label=OCI + "created", form=CREATED, lock=True,
                                   what="created time (SOURCE_DATE_EPOCH)")
    title: str = given("request.title", label=OCI + "title", config="image.title", absent="")
    licenses: str = given("request.licenses", label=OCI + "licenses", config="image.licenses", absent="")
    arch: str = given(ByConfig(lambda request, url: request.arch.name), label=LABEL_PREFIX + "arch", lock=True,
                      key="arch", config="build.arch")
    cuda_version: str | None = given("request.cuda_version", label=LABEL_PREFIX + "cuda-version", form=NONE_WORD,
                                     lock=True, key="cuda_version", config="build.cuda_version", absent=None)
    variant: str = given("request.variant", label=LABEL_PREFIX + "variant", lock=True, absent="")
    target: str = given("request.target", label=LABEL_PREFIX + "target", lock=True, key="target",
                        config="build.target")
    cpu_level: str = given(ByConfig(lambda request, url: request.cpu_level.name), label=LABEL_PREFIX + "cpu-level",
                           record=True, lock=True, lock_default="", key="cpu_level", config="build.cpu_level",
                           absent="all")
    cmake_args: tuple[str, ...] = given("made.cmake_args", label=LABEL_PREFIX + "flags", form=FLAGS, lock=True,
                                        key="cmake_args", what="CMake flags")  # every -D flag given to CMake
    build_number: int = given("source.build_number", label=LABEL_PREFIX + "build-number", form=NUMBER, lock=True,
                              key="build_number", what="build number")
    patch_set_sha256: str = given("source.patch_set_sha256", label=LABEL_PREFIX + "patch-set", lock=True,
                                  key="patch_set", what="patch set hash")
    template_sha256: str = given("tool.template_sha256", label=LABEL_PREFIX + "template", lock=True, key="template",
                                 what="template hash")
    tool_version: str = given("tool.tool_version", label=LABEL_PREFIX + "tool-version", lock=True,
                              what="tool version")
    devel_image: str = given("request.devel_image", record=True)
    runtime_image: str = given("request.runtime_image", record=True)
    provider: str = given("request.provider", record=True)  # nvidia | wheels | cpu
    platform: str = given("request.platform", record=True, lock=True, key="platform", config="build.platform")
    jobs: int = given("request.jobs", record=True, config="build.jobs")
    ccache: bool = given("request.ccache", record=True, config="build.ccache")
    no_vmm: bool = given("request.no_vmm", record=True, lock=True, config="build.no_vmm")
    extra_cmake_args: tuple[str, ...] = given("request.extra_cmake_args", record=True, config="build.cmake_args",
                                              absent=())  # the ones build.cmake_args added
    patches: tuple[str, ...] = given("source.patch_names", record=True, lock=True, absent=())
    # known once resolved: the base images with the digests they had, the CUDA root's wheels
    base_images: tuple[BaseImage, ...] = given(None, record=True, lock=True, key="base_images",
                                               what="base images", default=())
    cuda_wheels: tuple[str, ...] | None = given(None, record=True, key="cuda_wheels", absent=None,
                                                default=None)  # sha256 of each CUDA wheel (provider wheels), sorted
    cublas: bool | None = given(None, record=True, absent=None, default=None)  # the CUDA root holds cuBLAS
    cpu_host: str | None = given(None, record=True, key="cpu_host", absent=None, later=True,
                                 default=None)  # cpu_level native: the build machine's CPU
    build_platform: str | None = given(  # a cross build: where its compile ran (None: on the target platform);
        # not ByConfig: without build.build_platform, the machine that plans decides it
        lambda request, source, made: request.build_platform if request.cross else None, record=True,
        key="build_platform", absent=None, later=True, default=None)
    user: str = given("request.user", record=True, key="user", config="build.user", absent="", later=True,
                      default="")  # build.user (NAME:UID) the image runs as; "" = root (its passwd, home, USER)
    apt_snapshot: str = given("request.apt_snapshot", record=True, key="apt_snapshot", config="base.apt_snapshot",
                              absent="", later=True, default="")  # base.apt_snapshot (snapshot.debian.org's date)
    # issue 24: the image's description and URL (metadata: not in the key), and the base image labels
    description: str = given(ByConfig(lambda request, url: _fill(request.description, request, url)),
                             label=OCI + "description", config="image.description", absent="", later=True,
                             default="")
    url: str = given(ByConfig(lambda request, url: _fill(request.url, request, url)), label=OCI + "url",
                     config="image.url", absent="", later=True, default="")
    base_name: str = given(ByConfig(lambda request, url: request.runtime_image if request.base_labels else ""),
                           label=OCI + "base.name", absent="", later=True, default="")  # the runtime stage's base

    # ------------------------------------------------------------------ the forms

    def base_digest(self) -> str:
        """The digest of the runtime stage's base image (base_name), when it is known."""
        return next((b.digest for b in self.base_images if self.base_name and b.ref == self.base_name), "")

    def record(self) -> dict[str, Any]:
        """The inputs label's document: every input the other labels do not carry."""
        doc: dict[str, Any] = {"format": INPUTS_FORMAT}
        for i in INPUTS:
            value = getattr(self, i.name)
            if i.record and not i.left_out(value):
                doc[i.name] = i.json(value)
        return doc

    def to_labels(self, build_key: str = "", record: bool = True) -> dict[str, str]:
        """Every label of the image (the one label writer): the inputs that have one, the base image's
        digest, the build key when given, and the inputs label unless record is False (a plan's labels
        before its base images are resolved)."""
        labels = {i.label: i.form.write(getattr(self, i.name)) for i in INPUTS
                  if i.label and not i.left_out(getattr(self, i.name))}
        if self.base_digest():
            labels[OCI + "base.digest"] = self.base_digest()
        if build_key:
            labels[BUILD_KEY_LABEL] = build_key
        if record:
            labels[INPUTS_LABEL] = json.dumps(self.record(), sort_keys=True, separators=(",", ":"))
        return labels

    def lock_fields(self) -> dict[str, Any]:
        """The fields of a lock entry (release/lock.py LockEntry) that are inputs."""
        return {i.name: getattr(self, i.name) for i in INPUTS if i.lock}


INPUTS: tuple[Input, ...] = tuple(Input(name=f.name, annotation=str(f.type), **f.metadata["input"])
                                  for f in fields(BuildInputs))


# --------------------------------------------------------------------------- the model of a build

def cuda_wheel_hashes(manifest: dict[str, Any] | None) -> list[str] | None:
    """The sha256 of every wheel a provider-wheels CUDA root was laid out from."""
    if manifest is None:
        return None
    return sorted(w.get("sha256", "") for w in manifest.get("wheels", []) if isinstance(w, dict))


def _cublas(provider: str, manifest: dict[str, Any] | None) -> bool | None:
    if manifest is None or provider != "wheels" or "wheels" not in manifest:
        return None
    return any(str(w.get("package", "")).startswith("nvidia-cublas") for w in manifest["wheels"] if isinstance(w, dict))


@dataclass(frozen=True)
class _Made:  # "tool.x": what this buildkit brings; "made.x": what the plan made of the request and the source
    template_sha256: str
    tool_version: str
    cmake_args: tuple[str, ...]


def request_inputs(request: BuildRequest, source: SourceFacts, *, template_sha256: str, tool_version: str,
                   cmake_args: tuple[str, ...], base_images: Iterable[BaseImage] = (),
                   cuda_manifest: dict[str, Any] | None = None, cpu_host: str | None = None) -> BuildInputs:
    """Every input of a build: each input's `of`, and what was resolved (its base images with digests, the CUDA
    root's manifest, for cpu_level native the build machine's CPU)."""
    made = _Made(template_sha256, tool_version, tuple(cmake_args))
    scope = {"request": request, "source": source, "tool": made, "made": made}

    def value(of: str | InputFunction) -> Any:
        if callable(of):
            return of(request, source, made)
        where, _, name = of.partition(".")
        got = getattr(scope[where], name)
        return tuple(got) if isinstance(got, list) else got

    wheels = cuda_wheel_hashes(cuda_manifest)
    return BuildInputs(**{i.name: value(i.of) for i in INPUTS if i.of is not None}, base_images=tuple(base_images),
                       cuda_wheels=None if wheels is None else tuple(wheels),
                       cublas=_cublas(request.provider, cuda_manifest), cpu_host=cpu_host)


# --------------------------------------------------------------------------- the parser

_OTHER_RECORD_KEYS = {"format": KINDS["int"], "image_name": KINDS["str"]}  # (image_name: older records)


def _record_of(labels: Mapping[str, str], where: str) -> dict[str, Any]:
    text = labels.get(INPUTS_LABEL)
    if not text:
        raise InputsError(f"{where} has no {INPUTS_LABEL} label (built by a buildkit without reproducible "
                          "builds); the inputs jobs, ccache, provider and base image digests are missing")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise InputsError(f"{where}: the {INPUTS_LABEL} label is not JSON") from None
    if not isinstance(data, dict):
        raise InputsError(f"{where}: the {INPUTS_LABEL} label is not a JSON object")
    kinds = {**_OTHER_RECORD_KEYS, **{i.name: i.kind for i in INPUTS if i.record}}
    for key, kind in kinds.items():  # absent or null: the input that needs it says so
        value = data.get(key)
        if value is not None and not kind.ok(value):
            raise InputsError(f"{where}: the {INPUTS_LABEL} label's key {key!r} must be {kind.expect}, "
                              f"got {type(value).__name__}")
    return data


def need(data: Mapping[str, Any], key: str, where: str, what: str | None = None) -> Any:
    """data[key], or an InputsError naming the missing input."""
    value = data.get(key)
    if value is None or value == "":
        raise InputsError(f"{where}: the recorded input {what or key} is missing")
    return value


def parse_bases(pairs: Any, where: str) -> tuple[BaseImage, ...]:
    """Base images from the inputs label ([ref, digest] pairs) or a lock entry ({ref, digest} objects)."""
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise InputsError(f"{where}: the recorded input base images is missing")
    out = []
    for pair in pairs:
        ref, digest = (pair.get("ref"), pair.get("digest")) if isinstance(pair, dict) else tuple(pair)
        out.append(BaseImage(ref=ref, digest=digest))
    return tuple(out)


def _complete(values: dict[str, Any], where: str) -> BuildInputs:
    """The model from the values read; an input without one gets its `absent` value, or is an error."""
    for i in INPUTS:
        value = values.get(i.name)
        if value is None or (i.absent is NEEDED and value in ("", ())):
            if i.absent is NEEDED:
                raise InputsError(f"{where}: the recorded input {i.what or i.name} is missing")
            values[i.name] = i.absent
    return BuildInputs(**values)


def from_labels(labels: Mapping[str, str], where: str) -> BuildInputs:
    """The model from an image's labels (to_labels' output, or a pushed image's config)."""
    if not isinstance(labels, Mapping):
        raise InputsError(f"{where}: the labels must be an object of strings, got {type(labels).__name__}")
    for name, value in labels.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InputsError(f"{where}: the label {str(name)[:80]!r} must be a string, got {type(value).__name__}")
    record = _record_of(labels, where)
    values: dict[str, Any] = {}
    for i in INPUTS:
        if i.label and labels.get(i.label):
            values[i.name] = i.form.read(labels[i.label], where, i.label)
        elif i.record and record.get(i.name) is not None:
            values[i.name] = i.kind.from_json(record[i.name])
    return _complete(values, where)


def from_lock_entry(entry: Mapping[str, Any], where: str) -> BuildInputs:
    """The model from a lock entry: its own fields, and the labels it kept for the rest (they must
    be there: a lock written before labels were recorded lacks jobs, ccache and provider)."""
    labels = entry.get("labels") or {}
    if not labels:
        raise InputsError(f"{where} has no recorded labels (written by a buildkit without reproducible builds); "
                          "the inputs jobs, ccache and provider are missing")
    inputs = from_labels(labels, where)
    values: dict[str, Any] = {}
    for i in INPUTS:
        value = entry.get(i.name)
        if i.lock and value is not None and value != "":
            values[i.name] = parse_bases(value, where) if i.name == "base_images" else \
                tuple(value) if isinstance(value, list) else value
    inputs = replace(inputs, **values)
    if entry.get("cuda_root") and isinstance(entry["cuda_root"], dict):
        inputs = replace(inputs, cuda_wheels=tuple(cuda_wheel_hashes(entry["cuda_root"]) or ()))
    return inputs
