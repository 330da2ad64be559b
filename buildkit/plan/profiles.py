"""Runtime profiles: named llama-server set-ups in buildkit.toml, and the container that serves one.

A profile is a `[profiles.NAME]` table of buildkit.toml (config.py leaves those tables to this
module, and hands over the document it parsed: the file is read once). Its keys are declared as
schema fields and checked by plan/schema.py, like the settings. It holds the llama-server
arguments that make an image useful, e.g. the DFlash set-up:

    [profiles.dflash]
    description = "DFlash speculative decoding"
    gpus = "all"
    needs_draft = true
    model = "models/target.gguf"           # optional; host path, relative to buildkit.toml
    model_draft = "models/draft.gguf"      # optional; --model / --model-draft override both
    args = ["--spec-type", "dflash", "--n-gpu-layers", "99", ...]

Everything is checked before anything starts: unknown keys (with the key meant), wrong types,
arguments buildkit sets itself (model, draft model, host, port), missing model files.

`ServerSpec` is one container to run, as data: image, model files (each mounted read-only at
/models/...), llama-server arguments, GPUs and port. flows/serve/serving.py makes the engine's spec of it
(`buildkit run`, whose `--print` shows the command the engine makes, and `buildkit bench --image`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from buildkit.core.errors import ConfigError
from buildkit.plan.config import ConfigDocument
from buildkit.plan.schema import Field, check_table, type_name

CONTAINER_PORT = 8080
MODEL_DIR = "/models"


# llama-server options buildkit sets itself from the profile's other keys and the command line.
_RESERVED = {
    "-m": "model", "--model": "model", "-md": "model_draft", "--model-draft": "model_draft",
    "--spec-draft-model": "model_draft", "--host": None, "--port": "port",
}


def _reserved_arg(args: list[str]) -> str | None:
    """What is wrong with llama-server arguments that hold one buildkit sets itself (None: nothing)."""
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in _RESERVED:
            key = _RESERVED[flag]
            hint = f"use {key} = ... in the profile or the command-line option" if key else "buildkit sets it"
            return f"must not contain {flag} ({hint})"
    return None


def _port_range(port: int) -> str | None:
    return None if 0 < port < 65536 else f"must be between 1 and 65535, got {port}"


PROFILE_KEYS: tuple[Field, ...] = (
    Field("description", str, "one line saying what the profile is for"),
    Field("args", list, "llama-server arguments, a list of strings", rule=_reserved_arg),
    Field("model", str, "model file on the host (relative to buildkit.toml); --model overrides it"),
    Field("model_draft", str, "draft model file on the host; --model-draft overrides it"),
    Field("needs_draft", bool, "the profile cannot run without a draft model (speculative decoding)"),
    Field("gpus", str, "docker --gpus value (all, 2, device=0,1); empty or none = no GPU"),
    Field("port", int, "host port `buildkit run` publishes (default 8080)", rule=_port_range),
    Field("image", str, "image to run when --image is not given"),
)
_KEY_BY_NAME = {k.name: k for k in PROFILE_KEYS}


@dataclass(frozen=True)
class Profile:
    name: str
    args: tuple[str, ...] = ()
    description: str = ""
    model: Path | None = None  # resolved against buildkit.toml's folder
    model_draft: Path | None = None
    needs_draft: bool = False
    gpus: str = ""
    port: int = CONTAINER_PORT
    image: str = ""
    source: str = ""  # "buildkit.toml [profiles.NAME]", for messages


def _check_args(args: list[str], where: str) -> None:
    problem = _reserved_arg(args)
    if problem:
        raise ConfigError(f"{where}: args {problem}")


def parse_profile(name: str, table: Any, where: str, base_dir: Path) -> Profile:
    """Validate one [profiles.NAME] table; `where` names it in messages."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table ([profiles.{name}]), got {type_name(table)}")
    values = check_table(table, _KEY_BY_NAME, where, list_known=True)
    for key in ("model", "model_draft"):
        if values.get(key):
            try:
                values[key] = (base_dir / Path(values[key]).expanduser()).resolve()
            except (ValueError, OSError, RuntimeError):  # a NUL byte, a symlink loop
                raise ConfigError(f"{where}: {key} {values[key]!r} is not a file name") from None
        else:
            values.pop(key, None)
    gpus = values.get("gpus", "")
    values["gpus"] = "" if gpus.strip().lower() in ("", "none") else gpus.strip()
    values["args"] = tuple(values.get("args", ()))
    return Profile(name=name, source=where, **values)


def read_profiles(document: ConfigDocument) -> dict[str, Profile]:
    """Every profile of the parsed buildkit.toml (none when there is no config file)."""
    path = document.path
    if path is None:
        return {}
    table = document.data.get("profiles", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: profiles must be tables such as [profiles.dflash], got {type_name(table)}")
    base_dir = Path(path).resolve().parent
    return {name: parse_profile(name, body, f"{path} [profiles.{name}]", base_dir) for name, body in table.items()}


def get_profile(document: ConfigDocument, name: str) -> Profile:
    """The profile NAME of the parsed buildkit.toml (config.read_document, or ResolvedConfig.document)."""
    profiles = read_profiles(document)
    path = document.path
    if name not in profiles:
        where = str(path) if path else "no buildkit.toml found"
        known = f"profiles: {', '.join(sorted(profiles))}" if profiles else "it defines no [profiles.NAME] table"
        close = difflib.get_close_matches(name, profiles, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown profile {name!r} ({where}: {known}){hint}")
    return profiles[name]


@dataclass(frozen=True)
class ServerSpec:
    """One llama-server container: what `buildkit run` starts and `buildkit bench --image` measures."""

    image: str
    model: Path
    model_draft: Path | None = None
    args: tuple[str, ...] = ()  # llama-server arguments after the model options
    gpus: str = ""  # docker --gpus value; empty = no GPU
    host_port: int | None = CONTAINER_PORT  # None = any free port
    bind: str = ""  # host address the port is published on; empty = all
    name: str = ""
    labels: tuple[tuple[str, str], ...] = field(default=())
    profile: str = ""

    @property
    def model_in_container(self) -> str:
        return f"{MODEL_DIR}/{self.model.name}"

    @property
    def draft_in_container(self) -> str | None:
        return f"{MODEL_DIR}/draft/{self.model_draft.name}" if self.model_draft else None

    def mounts(self) -> list[tuple[str, str]]:
        """(host path, container path), both read-only."""
        out = [(str(self.model), self.model_in_container)]
        if self.model_draft:
            assert self.draft_in_container is not None  # set with model_draft
            out.append((str(self.model_draft), self.draft_in_container))
        return out


def make_spec(*, image: str | None, model: str | Path | None, model_draft: str | Path | None = None,
              profile: Profile | None = None, extra_args: tuple[str, ...] = (), gpus: str | None = None,
              host_port: int | None = None, use_profile_port: bool = True, bind: str = "", name: str = "",
              labels: tuple[tuple[str, str], ...] = (), check_files: bool = True) -> ServerSpec:
    """Merge the profile with the command line and check that every file is there (check_files: on this
    machine; a Kubernetes manifest names files that are on the cluster's volume)."""
    where = profile.source if profile else "the command line"
    image = image or (profile.image if profile else "")
    if not image:
        raise ConfigError(f"no image to run: pass --image REF{' or set image = in ' + where if profile else ''}")
    model_path = Path(model).expanduser().resolve() if model else (profile.model if profile else None)
    draft_path = Path(model_draft).expanduser().resolve() if model_draft else (profile.model_draft if profile else None)
    if model_path is None:
        raise ConfigError(f"no model: pass --model FILE{' or set model = in ' + where if profile else ''}")
    if profile and profile.needs_draft and draft_path is None:
        raise ConfigError(f"profile {profile.name!r} needs a draft model: pass --model-draft FILE "
                          f"or set model_draft = in {where}")
    for what, path in (("model", model_path), ("draft model", draft_path)):
        if check_files and path is not None and not path.is_file():
            raise ConfigError(f"{what} file {path} does not exist" if not path.exists()
                              else f"{what} {path} is not a file")
    _check_args(list(extra_args), "extra llama-server arguments")
    gpu_value = (profile.gpus if profile else "") if gpus is None else gpus
    gpu_value = "" if gpu_value.strip().lower() in ("", "none") else gpu_value.strip()
    gpu_device_requests(gpu_value)  # a malformed value stops here, before anything starts
    port = host_port
    if port is None and use_profile_port:
        port = profile.port if profile else CONTAINER_PORT
    return ServerSpec(image=image, model=model_path, model_draft=draft_path,
                      args=tuple(profile.args if profile else ()) + tuple(extra_args), gpus=gpu_value,
                      host_port=port, bind=bind, name=name, labels=labels,
                      profile=profile.name if profile else "")


def server_command(spec: ServerSpec, port: int = CONTAINER_PORT) -> list[str]:
    """llama-server's arguments inside the container (the image's entrypoint is llama-server)."""
    cmd = ["--host", "0.0.0.0", "--port", str(port), "--model", spec.model_in_container]
    if spec.model_draft:
        assert spec.draft_in_container is not None  # set with model_draft
        cmd += ["--model-draft", spec.draft_in_container]
    return cmd + list(spec.args)


def gpu_device_requests(gpus: str) -> list[dict[str, Any]]:
    """docker --gpus VALUE as Engine API DeviceRequests (what the docker CLI sends)."""
    if not gpus:
        return []
    value = gpus.strip()
    if value == "all":
        return [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]
    if value.isdigit():
        return [{"Driver": "", "Count": int(value), "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]
    if value.startswith("device="):
        ids = [d for d in value.split("=", 1)[1].strip("\"'").split(",") if d]
        return [{"Driver": "", "Count": 0, "DeviceIDs": ids, "Capabilities": [["gpu"]], "Options": {}}]
    raise ConfigError(f"--gpus {gpus!r}: expected all, a count, device=ID[,ID...] or none")
