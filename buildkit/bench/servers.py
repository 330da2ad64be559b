"""Where the workload checks get a llama-server (bench/workload.py): the engine's containers
(bench/containerservers.py), or a local process of a bundle's or a native build's server (gpu/localserver.py)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol


class Servers(Protocol):
    def serve(self, label: str, args: Sequence[str], draft: bool) -> AbstractContextManager[str]:
        """A llama-server with the target model (and the draft model when `draft`) and `args`; yields its base
        URL while it runs. `label` names it in logs and messages."""
        ...
