"""The `buildkit run` command: run an image's llama-server with a runtime profile (registered in cli/main.py)."""

from __future__ import annotations

import math
import shlex
import sys
from pathlib import Path

import click

from buildkit.cli.bench import project_config
from buildkit.cli.options import handle_errors
from buildkit.core.errors import ConfigError, ModelError
from buildkit.engine.api import Images
from buildkit.engine.current import get_engine
from buildkit.plan.config import read_document
from buildkit.plan.inputs import LABEL_PREFIX
from buildkit.plan.k8s import gpu_count, manifest_text, object_name, pinned_image
from buildkit.core.ggufheader import read_header
from buildkit.plan.llamaargs import parse_server_args
from buildkit.plan.olares import MANIFEST_VERSIONS, ManifestVersion
from buildkit.plan.profiles import Profile, ServerSpec, get_profile, make_spec
from buildkit.plan.vram import GiB, Estimate, estimate

CUDA_LABEL = LABEL_PREFIX + "cuda-version"


@click.command("run", context_settings={"ignore_unknown_options": False})
@click.option("--profile", "profile_name", help="Runtime profile of buildkit.toml ([profiles.NAME]).")
@click.option("--image", help="Image to run (default: the profile's image).")
@click.option("--model", type=click.Path(dir_okay=False), help="Model file (GGUF), mounted read-only "
                                                                "(default: the profile's model).")
@click.option("--model-draft", type=click.Path(dir_okay=False), help="Draft model for speculative decoding.")
@click.option("--gpus", help="docker --gpus value (all, 2, device=0); none = no GPU. Default: the profile's.")
@click.option("--port", type=int, help="Host port to publish the server on (default: the profile's, else 8080; "
                                       "with --format k8s: the port the server listens on and the Service has).")
@click.option("--bind", default="", help="Host address to publish on (default: all).")
@click.option("--name", default="", help="Container name (with --format k8s: the Deployment's and Service's).")
@click.option("--detach", "-d", is_flag=True, help="Run in the background (docker run --detach).")
@click.option("--print", "print_only", is_flag=True, help="Print the docker run command instead of running it.")
@click.option("--format", "output_format", type=click.Choice(["docker", "k8s", "olares"]), default="docker",
              show_default=True,
              help="With --print: docker (the docker run command) or k8s (a Kubernetes Deployment and Service as "
                   "JSON for kubectl apply -f: the image by digest, the nvidia.com/gpu limit, the model files from "
                   "the PersistentVolumeClaim NAME-models, probes on /health; --name names the objects). olares, "
                   "with --out DIR: an Olares Application Chart in DIR/NAME/, its GPU memory from the models' GGUF "
                   "headers (--name: the app's name).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="--format olares: the folder the app's chart folder is written into.")
@click.option("--olares-manifest", type=click.Choice(MANIFEST_VERSIONS), default=MANIFEST_VERSIONS[0],
              show_default=True, help="--format olares: OlaresManifest.yaml's version (0.12.0 with apiVersion v3 and "
                                      "spec.accelerator; 0.11.0 with v2 and spec.requiredGpu).")
@click.option("--owner", "owners", multiple=True,
              help="--format olares: a GitHub user who may update the app in the market (the owners file), "
                   "repeatable.")
@click.option("--models-folder", default="",
              help="--format olares: the folder under Olares' app-common folder that holds the model files "
                   "(default: huggingface/NAME).")
@click.option("--gpu-memory", "gpu_memory", type=float, default=None,
              help="The GPU's memory in GiB, to hold the estimate of what the server takes against (default: "
                   "nvidia-smi's memory.total here).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="buildkit.toml to read (default: ./buildkit.toml, or $LLAMA_BUILDKIT_CONFIG).")
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- LLAMA-SERVER ARGS...]")
@handle_errors
def run(profile_name: str | None, image: str | None, model: str | None, model_draft: str | None, gpus: str | None,
        port: int | None, bind: str, name: str, detach: bool, print_only: bool, output_format: str,
        out_dir: Path | None, olares_manifest: ManifestVersion, owners: tuple[str, ...], models_folder: str,
        gpu_memory: float | None, config_path: str | None, server_args: tuple[str, ...]) -> None:
    """Run an image's llama-server with a runtime profile: prints or executes the docker run command.

    \b
      buildkit run --profile dflash --image buun-llama-cpp:cuda13.1-sm120 --model m.gguf --model-draft d.gguf --print
      buildkit run --profile dflash --image REGISTRY/buun-llama-cpp:cuda13.1-sm120 --print --format k8s | kubectl apply -f -
    """  # noqa: E501 - click prints this \b example block verbatim in --help; one command, one line
    profile = get_profile(read_document(project_config(config_path)), profile_name) if profile_name else None
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"--port must be between 1 and 65535, got {port}")
    k8s = output_format == "k8s"
    engine = get_engine()
    if output_format == "olares":
        if out_dir is None:
            raise ConfigError("--format olares writes a chart: add --out DIR")
        olares_app(image, model, model_draft, profile, tuple(server_args), name, out_dir, olares_manifest, owners,
                   models_folder, gpu_memory, engine)
        return
    if out_dir is not None or owners or models_folder:
        raise ConfigError("--out, --owner and --models-folder are --format olares's")
    if k8s and not print_only:
        raise ConfigError("--format k8s prints a manifest (buildkit applies nothing): add --print")
    if k8s and (detach or bind):
        raise ConfigError("--detach and --bind are docker run's; a Kubernetes manifest has neither")
    spec = make_spec(image=image, model=model, model_draft=model_draft, profile=profile,
                     extra_args=tuple(server_args), gpus=gpus, host_port=port, bind=bind, name=name,
                     check_files=not print_only)
    if k8s:
        click.echo(kubernetes_manifest(spec, engine, gpus_given=gpus is not None))
        return
    from buildkit.flows.serve.serving import run_spec

    container = run_spec(spec, detach=detach)
    command = shlex.join(engine.run_command(container))
    if print_only:
        click.echo(command)
        return
    if spec.gpus:
        say_gpu_memory(spec, gpu_memory)
    click.echo(f"+ {command}", err=True)
    sys.exit(engine.attach(container))


def kubernetes_manifest(spec: ServerSpec, engine: Images, *, gpus_given: bool) -> str:
    """The manifest of spec, its image pinned by the engine's repo digest; a CUDA image (its label) gets
    one GPU unless --gpus or the profile says otherwise."""
    info = engine.image(spec.image)
    gpus = gpu_count(spec.gpus)
    if not gpus and not gpus_given and info is not None and info.labels.get(CUDA_LABEL, "none") not in ("", "none"):
        gpus = 1
    return manifest_text(spec, image=pinned_image(spec.image, info.repo_digests if info else ()),
                         name=object_name(spec.name, spec.profile), gpus=gpus)


def olares_app(image: str | None, model: str | None, model_draft: str | None, profile: Profile | None,
               server_args: tuple[str, ...], name: str, out_dir: Path, manifest_version: ManifestVersion,
               owners: tuple[str, ...], models_folder: str, gpu_memory: float | None, engine: Images) -> None:
    """Write the app's chart; the model files are read here for their GGUF headers (sizing)."""
    from buildkit.flows.serve.olaresapp import write_app

    spec = make_spec(image=image, model=model, model_draft=model_draft, profile=profile, extra_args=server_args)
    limit = gpu_bytes(gpu_memory)
    done = write_app(spec, out_dir, engine, name=name, owners=owners, manifest_version=manifest_version,
                     gpu_limit=limit, models_folder=models_folder)
    click.echo(f"wrote {done.folder}/: the Olares app {done.app.name} (OlaresManifest.yaml {manifest_version}, "
               f"the Helm chart, owners, i18n) for {done.app.image}")
    click.echo("GPU memory, estimated from the models' GGUF headers (requiredGPUMemory):")
    for line in done.estimate.lines(limit):
        click.echo(line)
    if limit is not None and done.estimate.total > limit:
        click.echo(f"warning: the estimate ({done.estimate.total / GiB:.2f} GiB) is over the GPU's memory "
                   f"({limit / GiB:.2f} GiB): Olares will not place the app on this GPU", err=True)
    click.echo(f"models: copy {spec.model.name}" + (f" and {spec.model_draft.name}" if spec.model_draft else "")
               + " into the app-common folder named by values.yaml's models.folder on the Olares host")
    if not owners:
        click.echo("owners is empty: add your GitHub name before a market pull request (--owner NAME)")


def gpu_estimate(spec: ServerSpec) -> Estimate:
    """What llama-server with spec's arguments takes of the GPU, from its models' GGUF headers."""
    target = read_header(spec.model)
    draft = read_header(spec.model_draft) if spec.model_draft else None
    return estimate(target, parse_server_args(spec.args), draft)


def gpu_bytes(given_gib: float | None) -> int | None:
    if given_gib is not None:
        if not math.isfinite(given_gib) or given_gib <= 0:
            raise ConfigError(f"--gpu-memory must be more than 0 GiB, got {given_gib:g}")
        return int(given_gib * GiB)
    from buildkit.flows.doctor.platformcheck import gpu_memory_bytes

    return gpu_memory_bytes()


def say_gpu_memory(spec: ServerSpec, given_gib: float | None) -> None:
    """The estimate on stderr, one line a component, and a warning before the server starts when the sum is
    over the GPU's memory."""
    memory = gpu_bytes(given_gib)
    try:
        found = gpu_estimate(spec)
    except ModelError as exc:  # the server judges its files itself: no estimate is no reason not to start it
        click.echo(f"buildkit: GPU memory not estimated: {exc}", err=True)
        return
    click.echo("buildkit: GPU memory, estimated from the models' GGUF headers:", err=True)
    for line in found.lines(memory):
        click.echo(line, err=True)
    if memory is not None and found.total > memory:
        click.echo(f"warning: the estimate ({found.total / GiB:.2f} GiB) is over the GPU's memory ({memory / GiB:.2f} "
                   "GiB): expect the server to fail to load; lower --ctx-size, quantize the KV cache "
                   "(-ctk q8_0 -ctv q8_0, or turbo4 on the DFlash fork), or offload fewer layers", err=True)
