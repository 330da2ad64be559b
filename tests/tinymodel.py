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
    return dict(zip(printable, map(chr, chars)))


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


def write_tiny_model(path: Path, seed: int = 0, n_layer: int = N_LAYER) -> Path:
    """Write the tiny llama model to `path` and return it."""
    return write_llama_model(path, seed=seed, n_layer=n_layer)


def write_llama_model(path: Path, *, seed: int = 0, n_layer: int = N_LAYER, n_embd: int = N_EMBD,
                      n_head: int = N_HEAD, n_ff: int = N_FF, q8_0: bool = False) -> Path:
    """The same llama model with other sizes; q8_0 stores the 2-D weights as Q8_0 (what bench/ uses:
    n_layer 14, n_embd 768, n_head 12, n_ff 2048 is about 100M parameters)."""
    import gguf

    N_EMBD, N_HEAD, N_FF = n_embd, n_head, n_ff  # noqa: N806  (the module's names, resized)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, types, merges, allowed = vocabulary()
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)

    def rand(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("buildkit-tiny-llama")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if q8_0 else gguf.LlamaFileType.ALL_F32)

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
        if q8_0 and data.ndim == 2:
            writer.add_tensor(name, gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, data)

    embd = rand(n_vocab, N_EMBD, scale=8.0)
    output = rand(n_vocab, N_EMBD, scale=8.0)
    output[~np.array(allowed)] = 0.0  # greedy decoding never picks a control or non-ASCII byte token
    add("token_embd.weight", embd)
    add("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    add("output.weight", output)
    for i in range(n_layer):
        add(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            add(f"blk.{i}.{name}.weight", rand(N_EMBD, N_EMBD))
        add(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        add(f"blk.{i}.ffn_gate.weight", rand(N_FF, N_EMBD))
        add(f"blk.{i}.ffn_up.weight", rand(N_FF, N_EMBD))
        add(f"blk.{i}.ffn_down.weight", rand(N_EMBD, N_FF))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


if __name__ == "__main__":
    out = write_tiny_model(Path(sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf"))
    print(f"{out} ({out.stat().st_size} bytes)")
