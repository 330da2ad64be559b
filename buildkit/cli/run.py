"""The `buildkit run` command: run an image's llama-server with a runtime profile (registered in cli/main.py)."""

from __future__ import annotations

import shlex
import sys

import click

from buildkit.cli.bench import _config_path
from buildkit.cli.options import handle_errors
from buildkit.core.errors import ConfigError
from buildkit.plan.config import read_document
from buildkit.plan.profiles import docker_run_argv, get_profile, make_spec


@click.command("run", context_settings={"ignore_unknown_options": False})
@click.option("--profile", "profile_name", help="Runtime profile of buildkit.toml ([profiles.NAME]).")
@click.option("--image", help="Image to run (default: the profile's image).")
@click.option("--model", type=click.Path(dir_okay=False), help="Model file (GGUF), mounted read-only "
                                                                "(default: the profile's model).")
@click.option("--model-draft", type=click.Path(dir_okay=False), help="Draft model for speculative decoding.")
@click.option("--gpus", help="docker --gpus value (all, 2, device=0); none = no GPU. Default: the profile's.")
@click.option("--port", type=int, help="Host port to publish the server on (default: the profile's, else 8080).")
@click.option("--bind", default="", help="Host address to publish on (default: all).")
@click.option("--name", default="", help="Container name.")
@click.option("--detach", "-d", is_flag=True, help="Run in the background (docker run --detach).")
@click.option("--print", "print_only", is_flag=True, help="Print the docker run command instead of running it.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="buildkit.toml to read (default: ./buildkit.toml, or $LLAMA_BUILDKIT_CONFIG).")
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- LLAMA-SERVER ARGS...]")
@handle_errors
def run(profile_name, image, model, model_draft, gpus, port, bind, name, detach, print_only, config_path,
        server_args):
    """Run an image's llama-server with a runtime profile: prints or executes the docker run command.

    \b
      buildkit run --profile dflash --image buun-llama-cpp:cuda13.1-sm120 --model m.gguf --model-draft d.gguf --print
    """
    profile = get_profile(read_document(_config_path(config_path)), profile_name) if profile_name else None
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"--port must be between 1 and 65535, got {port}")
    spec = make_spec(image=image, model=model, model_draft=model_draft, profile=profile,
                     extra_args=tuple(server_args), gpus=gpus, host_port=port, bind=bind, name=name)
    argv = docker_run_argv(spec, detach=detach)
    if print_only:
        click.echo(shlex.join(argv))
        return
    from buildkit.engine.api import get_engine

    click.echo(f"+ {shlex.join(argv)}", err=True)
    sys.exit(get_engine().attach(argv))
