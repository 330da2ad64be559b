"""How much GPU memory a llama-server set-up takes, from the GGUF headers of its models (pure): the sum the
first user did by hand (target 16.8 GB + drafter 1.75 + KV cache at 32K ~2 + buffers ~1.7 = 22.3 GB), one
line a component.

What each component is, as the DFlash fork (1c4788192) allocates it:

* weights: the tensors of the layers offloaded. llama.cpp offloads the last `-ngl` of the n_layer
  repeating layers and the output layer (`i_gpu_start = n_layer + 1 - ngl`, llama-model.cpp); the input
  layer (token_embd, the DFlash drafter's fc and hidden norm) stays in host memory. A model without
  output.weight (tied embeddings) gets token_embd a second time as its output layer.
* KV cache: per offloaded layer with attention (a hybrid model's recurrent layers have none: qwen35's
  layers where head_count_kv is 0, or that have ssm_conv1d weights, or all but every
  full_attention_interval-th), K and V rows of the cache types for `pad(ctx, 256)` cells
  (llama-context.cpp); TurboQuant types pad each head to a multiple of 128 (llama-kv-cache.cpp). The DFlash
  drafter has no KV cache (its memory is none, llama-model.cpp).
* recurrent state: per recurrent layer, f32 conv and SSM states (n_embd_r, n_embd_s of
  llama-hparams.cpp) for each parallel slot: small and fixed, whatever the context.
* DFlash buffers: the drafter's GPU cross ring (2 x 512 tokens x target layers x n_embd, f32,
  cross-ring-interleave.cu) and the target's replay tapes of its recurrent layers (25 tokens).
* compute buffers: an estimate, not ggml's allocator: per physical batch token the logits (n_vocab), four
  hidden-state rows and three feed-forward rows, f32; without flash attention the scores of one layer
  (heads x cells); with a quantized KV cache the f16 copy of one layer's K and V that the CUDA
  flash-attention kernels make for a batch.
* CUDA context: an allowance per process (CUDA_CONTEXT_BYTES), not measured here.

bench/vram_estimate.py holds the estimate against a peak measured on a GPU (docs/gpu.md, "GPU memory").
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from buildkit.core.errors import ModelError
from buildkit.core.ggufheader import ArrayLength, GgufHeader, TensorInfo, row_bytes
from buildkit.plan.llamaargs import ServerSettings

GiB = 1 << 30
MiB = 1 << 20
CTX_PAD = 256                      # llama-context.cpp: n_ctx = GGML_PAD(n_ctx, 256)
TURBO_HEAD = 128                   # TurboQuant pads each head to a multiple of this
DFLASH_RING_TOKENS = 512           # LLAMA_DFLASH_PER_SLOT_CTX
DFLASH_TAPE_TOKENS = 25            # LLAMA_DFLASH_MAX_VERIFY_TOKENS
CUDA_CONTEXT_BYTES = 512 * MiB     # allowance per process: the CUDA context, cuBLAS, kernels; not measured here
HYBRID_ARCHS = ("qwen35", "qwen35moe", "qwen3next")
DFLASH_DRAFT_ARCH = "dflash-draft"
INPUT_TENSORS = ("token_embd.", "position_embd.", "token_types.", "per_layer_token_embd.", "dflash_fc.",
                 "dflash_hidden_norm.")
_LAYER = re.compile(r"blk\.(\d+)\.")


@dataclass(frozen=True)
class Component:
    name: str
    bytes: int
    detail: str = ""


@dataclass(frozen=True)
class Estimate:
    components: tuple[Component, ...]
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(c.bytes for c in self.components)

    def lines(self, gpu_bytes: int | None = None) -> list[str]:
        """One line a component, then the sum (against the GPU's memory when known), then the notes."""
        width = max(len(c.name) for c in self.components)
        out = [f"  {c.name:<{width}}  {size_text(c.bytes)}" + (f"  {c.detail}" if c.detail else "")
               for c in self.components]
        against = f" of the GPU's {gpu_bytes / GiB:.2f} GiB" if gpu_bytes else ""
        out.append(f"  {'sum':<{width}}  {size_text(self.total)}{against}")
        return out + [f"  ({note})" for note in self.notes]


def size_text(n: int) -> str:
    """GiB with two decimals, or MiB below a tenth of a GiB (a tiny model's parts)."""
    return f"{n / GiB:7.2f} GiB" if n >= 100 * MiB else f"{n / MiB:7.1f} MiB"


@dataclass(frozen=True)
class Shape:
    """What the estimate needs of one model's header."""

    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int
    n_ff: int
    heads: tuple[int, ...]       # per layer
    heads_kv: tuple[int, ...]    # per layer (0: no attention)
    head_k: int
    head_v: int
    recurrent: tuple[bool, ...]  # per layer
    n_embd_r: int                # recurrent conv state per layer (values)
    n_embd_s: int                # recurrent SSM state per layer (values)
    ctx_train: int


def _per_layer(value: object, n_layer: int, what: str, path: str) -> tuple[int, ...]:
    if isinstance(value, list):
        if len(value) != n_layer or not all(isinstance(v, int) for v in value):
            raise ModelError(f"{path}: {what} has {len(value)} values for {n_layer} layers")
        return tuple(value)
    if isinstance(value, int):
        return (value,) * n_layer
    raise ModelError(f"{path}: the GGUF header has no usable {what}")


def shape_of(header: GgufHeader) -> Shape:
    arch, path = header.arch, header.path
    n_layer = header.key("block_count")
    n_embd = header.key("embedding_length")
    if not isinstance(n_layer, int) or not isinstance(n_embd, int) or n_layer <= 0 or n_embd <= 0:
        raise ModelError(f"{path}: the GGUF header has no {arch}.block_count or {arch}.embedding_length")
    heads = _per_layer(header.key("attention.head_count", 0), n_layer, "attention.head_count", path)
    heads_kv = _per_layer(header.key("attention.head_count_kv", list(heads)), n_layer, "head_count_kv", path)
    n_head = max(heads) or 1
    head_k = header.key("attention.key_length", n_embd // n_head)
    head_v = header.key("attention.value_length", n_embd // n_head)
    ff = header.key("feed_forward_length", 0)
    n_ff = max(ff) if isinstance(ff, list) and ff else ff if isinstance(ff, int) else 0
    n_ff = max(n_ff, int(header.key("expert_feed_forward_length", 0)) * int(header.key("expert_used_count", 0)))
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    n_vocab = header.key("vocab_size") or (tokens.length if isinstance(tokens, ArrayLength) else
                                            len(tokens) if isinstance(tokens, list) else 0)
    recurrent = _recurrent_layers(header, n_layer, heads_kv)
    d_conv, d_inner = int(header.key("ssm.conv_kernel", 0)), int(header.key("ssm.inner_size", 0))
    d_state, n_group = int(header.key("ssm.state_size", 0)), int(header.key("ssm.group_count", 0))
    n_embd_r = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
    return Shape(arch, n_layer, n_embd, int(n_vocab), n_ff, heads, heads_kv, int(head_k), int(head_v), recurrent,
                 n_embd_r, d_state * d_inner, int(header.key("context_length", 0)))


def _recurrent_layers(header: GgufHeader, n_layer: int, heads_kv: tuple[int, ...]) -> tuple[bool, ...]:
    """qwen35's rule (detect_recurrent_layers_qwen35): head_count_kv 0, else ssm_conv1d weights, else all
    but every full_attention_interval-th layer; other architectures have none."""
    if header.arch not in HYBRID_ARCHS:
        return (False,) * n_layer
    if 0 in heads_kv:
        return tuple(h == 0 for h in heads_kv)
    names = {t.name for t in header.tensors}
    if any(f"blk.{i}.ssm_conv1d.weight" in names for i in range(min(n_layer, 8))):
        return tuple(f"blk.{i}.ssm_conv1d.weight" in names for i in range(n_layer))
    interval = int(header.key("full_attention_interval", 4)) or 4
    return tuple((i + 1) % interval != 0 for i in range(n_layer))


def offloaded(n_layer: int, gpu_layers: int | None) -> tuple[int, bool]:
    """(first repeating layer on the GPU, whether the output layer is): llama-model.cpp's i_gpu_start."""
    ngl = n_layer + 1 if gpu_layers is None else gpu_layers
    start = max(n_layer + 1 - ngl, 0)
    return start, ngl >= 1


def weights_on_gpu(header: GgufHeader, gpu_layers: int | None) -> tuple[int, dict[str, int], int, int]:
    """(bytes, bytes by tensor type, layers offloaded, layers) of the tensors llama.cpp puts on the GPU."""
    shape_layers = int(header.key("block_count", 0))
    start, output = offloaded(shape_layers, gpu_layers)
    by_type: dict[str, int] = defaultdict(int)
    names = {t.name for t in header.tensors}

    def add(t: TensorInfo) -> None:
        by_type[t.type.name] += t.nbytes

    for t in header.tensors:
        layer = _LAYER.match(t.name)
        if layer:
            if int(layer.group(1)) >= start:
                add(t)
        elif t.name.startswith(INPUT_TENSORS):
            if output and t.name == "token_embd.weight" and "output.weight" not in names:
                add(t)  # tied embeddings: the output layer's copy
        elif output:
            add(t)
    return sum(by_type.values()), dict(by_type), shape_layers - min(start, shape_layers), shape_layers


def host_bytes(header: GgufHeader, gpu_layers: int | None) -> int:
    """The bytes of the weights that stay in host memory (the input layer, the layers not offloaded)."""
    start, output = offloaded(int(header.key("block_count", 0)), gpu_layers)
    total = 0
    for t in header.tensors:
        layer = _LAYER.match(t.name)
        on_gpu = int(layer.group(1)) >= start if layer else output and not t.name.startswith(INPUT_TENSORS)
        total += 0 if on_gpu else t.nbytes
    return total


def _weights_text(by_type: dict[str, int], on_gpu: int, n_layer: int) -> str:
    """"q4_K 12.10, q6_K 3.90, f32 0.02 GiB; 64 of 64 layers": the largest three types, the rest together."""
    top = sorted(by_type.items(), key=lambda kv: -kv[1])
    shown = [f"{name} {size / GiB:.2f}" for name, size in top[:3]]
    rest = sum(size for _, size in top[3:])
    types = ", ".join(shown + ([f"other {rest / GiB:.2f}"] if rest else []))
    return (f"{types} GiB; " if types else "") + f"{on_gpu} of {n_layer} layers"


def kv_bytes(shape: Shape, cells: int, cache_k: str, cache_v: str, start: int) -> tuple[int, int]:
    """(bytes, layers) of the KV cache of the attention layers from `start` on."""
    total, layers = 0, 0
    for il in range(start, shape.n_layer):
        if shape.recurrent[il] or shape.heads_kv[il] == 0:
            continue
        head_k = -(-shape.head_k // TURBO_HEAD) * TURBO_HEAD if cache_k.startswith("turbo") else shape.head_k
        head_v = -(-shape.head_v // TURBO_HEAD) * TURBO_HEAD if cache_v.startswith("turbo") else shape.head_v
        heads = shape.heads_kv[il]
        total += cells * (row_bytes(cache_k, head_k * heads) + row_bytes(cache_v, head_v * heads))
        layers += 1
    return total, layers


def compute_bytes(shape: Shape, tokens: int, cells: int, flash_attn: bool, quantized_kv: bool,
                  n_vocab: int) -> int:
    """The compute buffer estimate for `tokens` per physical batch (see the module's text)."""
    rows = n_vocab + 4 * shape.n_embd + 3 * shape.n_ff
    total = tokens * rows * 4
    if not flash_attn:
        total += tokens * max(shape.heads) * cells * 4
    elif quantized_kv and tokens > 1:
        kv_width = max((shape.heads_kv[i] for i in range(shape.n_layer) if not shape.recurrent[i]), default=0)
        total += cells * kv_width * (shape.head_k + shape.head_v) * 2
    return total


def estimate(target: GgufHeader, settings: ServerSettings, draft: GgufHeader | None = None) -> Estimate:
    """The GPU memory of llama-server serving target (and draft) with these settings."""
    shape = shape_of(target)
    notes = list(settings.notes)
    ctx = settings.ctx or shape.ctx_train
    if not settings.ctx:
        notes.append(f"no --ctx-size: the model's training context, {ctx:,} (llama-server's --fit may lower it)")
    cells = -(-ctx // CTX_PAD) * CTX_PAD
    weights, by_type, on_gpu, n_layer = weights_on_gpu(target, settings.gpu_layers)
    start, _ = offloaded(n_layer, settings.gpu_layers)
    parts = [Component("target weights", weights, _weights_text(by_type, on_gpu, n_layer))]
    draft_shape = shape_of(draft) if draft is not None else None
    if draft is not None and draft_shape is not None:
        d_weights, d_types, d_on, d_layers = weights_on_gpu(draft, settings.gpu_layers_draft)
        parts.append(Component("drafter weights", d_weights, _weights_text(d_types, d_on, d_layers)))
    kv, kv_layers = kv_bytes(shape, cells, settings.cache_k, settings.cache_v, start)
    attention = sum(1 for i in range(n_layer) if not shape.recurrent[i] and shape.heads_kv[i])
    if not settings.kv_offload:
        notes.append("--no-kv-offload: the KV cache is in host memory")
        kv = 0
    parts.append(Component("KV cache", kv, f"{cells:,} cells, K {settings.cache_k}, V {settings.cache_v}; {kv_layers} "
                           f"layers{f' (the {attention} with attention of {n_layer})' if attention < n_layer else ''}"))
    if draft is not None and draft_shape is not None and draft.arch != DFLASH_DRAFT_ARCH:
        d_cells = -(-(settings.ctx_draft or ctx) // CTX_PAD) * CTX_PAD
        d_start, _ = offloaded(draft_shape.n_layer, settings.gpu_layers_draft)
        d_kv, d_kv_layers = kv_bytes(draft_shape, d_cells, settings.cache_k_draft, settings.cache_v_draft, d_start)
        parts.append(Component("drafter KV cache", d_kv, f"{d_cells:,} cells; {d_kv_layers} layers"))
    recurrent = [i for i in range(start, n_layer) if shape.recurrent[i]]
    if recurrent:
        state = len(recurrent) * (shape.n_embd_r + shape.n_embd_s) * 4 * settings.parallel
        parts.append(Component("recurrent state", state, f"{len(recurrent)} layers x {settings.parallel} "
                               "slot(s), f32, whatever the context"))
    if draft is not None and draft.arch == DFLASH_DRAFT_ARCH and draft_shape is not None:
        parts.append(Component("DFlash buffers", dflash_bytes(draft, draft_shape, target, len(recurrent)),
                               f"cross ring of {DFLASH_RING_TOKENS} tokens, replay tapes of {len(recurrent)} layers"))
    flash = settings.flash_attn != "off"
    quantized = settings.cache_k != "f16" or settings.cache_v != "f16"
    tokens = settings.physical_batch
    compute = compute_bytes(shape, tokens, cells, flash, quantized, shape.n_vocab)
    detail = f"batch of {tokens} tokens, flash attention {'on' if flash else 'off'}"
    if draft is not None and draft_shape is not None:
        d_tokens = int(draft.key("dflash.block_size", 0)) or min(tokens, settings.ctx_draft or tokens)
        compute += compute_bytes(draft_shape, d_tokens, -(-(settings.ctx_draft or ctx) // CTX_PAD) * CTX_PAD, flash,
                                 False, draft_shape.n_vocab or shape.n_vocab)
        detail += f"; drafter {d_tokens} tokens"
    parts.append(Component("compute buffers", compute, detail + " (estimated)"))
    parts.append(Component("CUDA context", CUDA_CONTEXT_BYTES, "allowance per process, not measured here"))
    if shape.arch not in HYBRID_ARCHS and target.key("attention.sliding_window"):
        notes.append("sliding-window layers counted at the full context: an upper bound")
    return Estimate(tuple(parts), tuple(notes))


def dflash_bytes(draft: GgufHeader, draft_shape: Shape, target: GgufHeader, recurrent_layers: int) -> int:
    ids = draft.key("dflash.target_layer_ids", [])
    n_target = len(ids) if isinstance(ids, list) else 0
    ring = 2 * DFLASH_RING_TOKENS * n_target * draft_shape.n_embd * 4
    state, heads_v = int(target.key("ssm.state_size", 0)), int(target.key("ssm.time_step_rank", 0))
    tape = recurrent_layers * DFLASH_TAPE_TOKENS * 4 * (2 * state * heads_v + 2 * heads_v)
    return ring + tape

