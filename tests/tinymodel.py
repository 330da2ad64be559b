"""A tiny GGUF model that a real llama-server loads and generates with, written with the `gguf` package.

Llama architecture with random weights (fixed seed): 2 layers, n_embd 64, 4 heads, n_ff 128, a
GPT-2 style byte-level BPE vocabulary of 256 byte tokens, a few merges and three control tokens
(301 tokens), and a ChatML chat template that honours `enable_thinking`. About 0.3 MB.

The output rows of the control tokens and of the non-ASCII byte tokens are zero, so greedy
decoding (temperature 0) only ever picks printable ASCII: streamed text is valid UTF-8 and
every generated token arrives as its own chunk. Generation never ends by itself in any useful
way, which is what a benchmark with `ignore_eos` wants anyway.

    python tests/tinymodel.py OUT.gguf       # write one by hand
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

N_LAYER = 2
N_EMBD = 64
N_HEAD = 4
N_FF = 128
N_CTX = 8192
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MERGES = ("Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r", "Ġ s", "a t", "Ġ w", "Ġ o", "e n",
          "Ġ c", "i t", "i s", "a n", "o r", "e s", "Ġ b", "e d", "Ġ f", "in g", "Ġ p", "o u", "Ġa n",
          "a l", "a r", "Ġt o", "Ġ m", "Ġo f", "Ġ in", "Ġ d", "Ġ h", "Ġan d", "i c", "a s", "l e")

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what byte-level BPE vocabularies use)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, map(chr, chars), strict=False))


def vocabulary() -> tuple[list[str], list[int], list[str], list[bool]]:
    """(tokens, token types, merges, allowed-as-output) for the byte-level BPE vocabulary."""
    import gguf

    byte_map = _bytes_to_unicode()
    tokens = [byte_map[b] for b in range(256)]
    types = [int(gguf.TokenType.NORMAL)] * 256
    allowed = [32 <= b < 127 or b == 10 for b in range(256)]
    for merge in MERGES:
        left, right = merge.split(" ")
        tokens.append(left + right)
        types.append(int(gguf.TokenType.NORMAL))
        allowed.append(True)
    for special in SPECIALS:
        tokens.append(special)
        types.append(int(gguf.TokenType.CONTROL))
        allowed.append(False)
    assert len(set(tokens)) == len(tokens)
    return tokens, types, list(MERGES), allowed


@dataclass(frozen=True)
class Shape:
    """The dimensions of a generated llama model (the vocabulary is always the one above)."""
    n_layer: int = N_LAYER
    n_embd: int = N_EMBD
    n_head: int = N_HEAD
    n_ff: int = N_FF
    n_ctx: int = N_CTX


# bytes per element of the weight matrices for each file type; norms are always F32
FILE_TYPES = {"f32": (4, 1), "f16": (2, 1), "q8_0": (34, 32)}  # (bytes, per elements)


def tensor_shapes(shape: Shape, n_vocab: int) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy shape, is a weight matrix) of every tensor, in file order."""
    e, f = shape.n_embd, shape.n_ff
    out = [("token_embd.weight", (n_vocab, e), True), ("output_norm.weight", (e,), False),
           ("output.weight", (n_vocab, e), True)]
    for i in range(shape.n_layer):
        out.append((f"blk.{i}.attn_norm.weight", (e,), False))
        out += [(f"blk.{i}.{name}.weight", (e, e), True) for name in ("attn_q", "attn_k", "attn_v", "attn_output")]
        out.append((f"blk.{i}.ffn_norm.weight", (e,), False))
        out += [(f"blk.{i}.ffn_gate.weight", (f, e), True), (f"blk.{i}.ffn_up.weight", (f, e), True),
                (f"blk.{i}.ffn_down.weight", (e, f), True)]
    return out


def model_size(shape: Shape, file_type: str = "f32", n_vocab: int | None = None) -> tuple[int, int]:
    """(parameters, bytes of tensor data) of the model write_llama_model writes (alignment not counted)."""
    n_vocab = n_vocab if n_vocab is not None else len(vocabulary_tokens())
    per, block = FILE_TYPES[file_type]
    params = nbytes = 0
    for _, dims, matrix in tensor_shapes(shape, n_vocab):
        count = int(np.prod(dims))
        params += count
        nbytes += count // block * per if matrix else count * 4
    return params, nbytes


def layers_for_size(target_bytes: int, shape: Shape, file_type: str) -> int:
    """The number of layers that brings the tensor data closest to target_bytes (at least 1)."""
    one = model_size(Shape(1, shape.n_embd, shape.n_head, shape.n_ff, shape.n_ctx), file_type)[1]
    two = model_size(Shape(2, shape.n_embd, shape.n_head, shape.n_ff, shape.n_ctx), file_type)[1]
    per_layer, fixed = two - one, 2 * one - two
    return max(1, round((target_bytes - fixed) / per_layer))


def vocabulary_tokens() -> list[str]:
    """The token list alone (needs no gguf)."""
    byte_map = _bytes_to_unicode()
    return [byte_map[b] for b in range(256)] + [m.replace(" ", "") for m in MERGES] + list(SPECIALS)


def _as_file_type(gguf, data: np.ndarray, file_type: str):
    if file_type == "f32":
        return data, None
    if file_type == "f16":
        return data.astype(np.float16), None
    qtype = gguf.GGMLQuantizationType.Q8_0
    return gguf.quants.quantize(data, qtype), qtype


def write_llama_model(path: Path, shape: Shape = Shape(), seed: int = 0, file_type: str = "f32",
                      name: str = "buildkit-tiny-llama") -> Path:
    """Write a llama model of the given shape with random weights (fixed seed) and return its path."""
    import gguf

    if file_type not in FILE_TYPES:
        raise ValueError(f"file type {file_type!r}: one of {', '.join(FILE_TYPES)}")
    if shape.n_embd % shape.n_head:
        raise ValueError(f"n_embd {shape.n_embd} is not a multiple of n_head {shape.n_head}")
    if file_type == "q8_0" and (shape.n_embd % 32 or shape.n_ff % 32):
        raise ValueError("q8_0 needs n_embd and n_ff to be multiples of 32")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, types, merges, allowed = vocabulary()
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)

    def rand(*dims: int, scale: float = 0.5) -> np.ndarray:
        return (rng.standard_normal(dims) * scale / np.sqrt(dims[-1])).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(shape.n_ctx)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                          "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[file_type])

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    def add(name: str, data: np.ndarray) -> None:
        if data.ndim == 1:  # norms stay F32, as llama.cpp's converters write them
            writer.add_tensor(name, data)
            return
        converted, qtype = _as_file_type(gguf, data, file_type)
        if qtype is None:
            writer.add_tensor(name, converted)
        else:
            writer.add_tensor(name, converted, raw_shape=converted.shape, raw_dtype=qtype)

    e, f = shape.n_embd, shape.n_ff
    embd = rand(n_vocab, e, scale=8.0)
    output = rand(n_vocab, e, scale=8.0)
    output[~np.array(allowed)] = 0.0  # greedy decoding never picks a control or non-ASCII byte token
    add("token_embd.weight", embd)
    add("output_norm.weight", np.ones(e, dtype=np.float32))
    add("output.weight", output)
    for i in range(shape.n_layer):
        add(f"blk.{i}.attn_norm.weight", np.ones(e, dtype=np.float32))
        for tname in ("attn_q", "attn_k", "attn_v", "attn_output"):
            add(f"blk.{i}.{tname}.weight", rand(e, e))
        add(f"blk.{i}.ffn_norm.weight", np.ones(e, dtype=np.float32))
        add(f"blk.{i}.ffn_gate.weight", rand(f, e))
        add(f"blk.{i}.ffn_up.weight", rand(f, e))
        add(f"blk.{i}.ffn_down.weight", rand(e, f))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_model(path: Path, seed: int = 0, n_layer: int = N_LAYER) -> Path:
    """Write the tiny llama model to `path` and return it."""
    return write_llama_model(path, Shape(n_layer=n_layer), seed=seed, file_type="f32")


if __name__ == "__main__":
    out = write_tiny_model(Path(sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf"))
    print(f"{out} ({out.stat().st_size} bytes)")
