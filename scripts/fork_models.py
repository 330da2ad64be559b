#!/usr/bin/env python3
"""Tiny GGUF models of the fork's architectures (issue 37 item 3), random weights, fixed seed.

Writes two files into OUT (default ./fork-models):

  qwen35-tiny.gguf        a `qwen35` hybrid target: Gated DeltaNet (recurrent) layers and
                          full-attention layers (every FULL_ATTN_INTERVAL-th layer), as the
                          fork's src/llama-model.cpp (LLM_ARCH_QWEN35) loads it
  dflash-draft-tiny.gguf  a `dflash-draft` drafter made for that target: same n_embd and
                          tokenizer, `dflash.target_layer_ids` naming target layers,
                          `dflash.n_target_features` = len(ids) * n_embd, a mask token

Keys and tensor names are written by name as the fork's loader reads them (src/llama-arch.cpp
of 1c4788192); only the `gguf` package's writer is used (PyPI 0.19.0 has no dflash-draft
architecture, so nothing here depends on its architecture tables). The tokenizer is a byte-level
BPE ("gpt2") over the 256 bytes plus a few merges and control tokens: llama-server accepts it and
both models carry the same one, as speculative decoding requires.

Two kinds of weights (--kind):

  random     random weights (seed 37): every code path runs, but the drafter's drafts are never
             accepted (0-2 of ~1,600 on the H200), so no speed-up can show
  accepting  a pair whose drafts the target accepts: every token's embedding carries one shared
             direction that the output head reads as ATTRACTOR (" the"); the drafter's layers add
             nothing (their output projections are zero), so it drafts ATTRACTOR at every block
             position; the target's layers add a small random part (--noise, the scale of their
             output projections): at 0 it predicts ATTRACTOR after every token (all drafts
             accepted), and the larger the noise the more often it predicts another token (drafts
             rejected part of the way: both of speculative decoding's paths, accept and roll back)

Tensor types are what the fork's loader and ops take, as convert_hf_to_gguf writes them: 1-D tensors
(norms, biases, ssm_a) and ssm_conv1d in f32 at every size (a medium file in f16 had them in f16, and
the fork's warm-up refused it: `binary_op: unsupported types`, then `GGML_ASSERT(src1->nb[0] ==
sizeof(float))` in ssm_conv); 2-D weights in the size's type. The vocabulary holds only tokens that
decode to text (printable ASCII, tab and newline, a few merges, the control tokens): with all 256
byte tokens a random model emitted bytes that are not UTF-8 and the server's output parser answered
HTTP 500 "Failed to parse input at pos 0".

Usage: python3 scripts/fork_models.py [--out DIR] [--seed N] [--size tiny|medium] [--kind random|accepting]
       [--noise X]
Needs numpy and gguf (pip install gguf==0.19.0); runs without buildkit installed.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - depends on the host
    sys.exit("fork_models: the gguf package is missing (pip install gguf==0.19.0)")

TARGET_ARCH = "qwen35"
DRAFT_ARCH = "dflash-draft"

# target shape: small enough to write in a second, big enough for every code path
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 16
N_FF = 128
N_LAYER = 4
FULL_ATTN_INTERVAL = 2          # layers 1 and 3 are attention, 0 and 2 Gated DeltaNet
N_ROT = 8
ROPE_SECTIONS = [2, 1, 1, 0]     # sums to N_ROT / 2 (imrope over text positions)
SSM_CONV = 4
SSM_STATE = 16                   # head_k_dim = head_v_dim
SSM_GROUPS = 2                   # n_k_heads
SSM_DT_RANK = 4                  # n_v_heads
CTX = 4096

# drafter
DRAFT_LAYERS = 2
TARGET_LAYER_IDS = [1, 3]
BLOCK_SIZE = 16
WEIGHT_DTYPE = np.float32

# --size medium: the same architectures at a size that keeps a GPU busy for a tokens/s figure
# (about 0.6 GB of f16 weights: 16 layers, every 4th full attention as in Qwen3.5, 128-wide heads)
SIZES: dict[str, dict[str, object]] = {
    "tiny": {},
    "medium": {"N_EMBD": 1024, "N_HEAD": 8, "N_HEAD_KV": 2, "HEAD_DIM": 128, "N_FF": 3072,
               "N_LAYER": 16, "FULL_ATTN_INTERVAL": 4, "N_ROT": 64, "ROPE_SECTIONS": [11, 11, 10, 0],
               "SSM_STATE": 128, "SSM_GROUPS": 8, "SSM_DT_RANK": 16,
               "TARGET_LAYER_IDS": [3, 7, 11, 15], "WEIGHT_DTYPE": np.float16},
}


def use_size(name: str) -> None:
    """Set the module's shape constants to SIZES[name] (the writers read them)."""
    globals().update(SIZES[name])


def byte_to_unicode() -> list[str]:
    """GPT-2's printable stand-in for each of the 256 bytes."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    table: dict[int, str] = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return [table[b] for b in range(256)]


TEXT_BYTES = [0x09, 0x0A] + list(range(0x20, 0x7F))  # tab, newline, printable ASCII: each decodes to text
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s"]
ATTRACTOR = "Ġthe"  # " the": what the accepting pair predicts


def vocab() -> tuple[list[str], list[int], list[str], dict[str, int]]:
    """Tokens (GPT-2's byte stand-ins for TEXT_BYTES, the merges, the control tokens, padding), their types,
    the merges and the ids of the special tokens (and of ATTRACTOR, as "attractor")."""
    table = byte_to_unicode()
    tokens = [table[b] for b in TEXT_BYTES]
    for m in MERGES:
        tokens.append(m.replace(" ", ""))
    specials = {"eos": "<|endoftext|>", "im_start": "<|im_start|>", "im_end": "<|im_end|>",
                "mask": "<|mask|>"}
    ids: dict[str, int] = {"attractor": tokens.index(ATTRACTOR)}
    types = [1] * len(tokens)
    for key, text in specials.items():
        ids[key] = len(tokens)
        tokens.append(text)
        types.append(3)  # CONTROL
    while len(tokens) % 16:
        tokens.append(f"<|pad{len(tokens)}|>")
        types.append(3)  # CONTROL: a padding token decodes to nothing, never to bytes
    return tokens, types, list(MERGES), ids


def add_tokenizer(w: gguf.GGUFWriter, tokens: list[str], types: list[int], merges: list[str],
                  ids: dict[str, int]) -> None:
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", ids["eos"])
    w.add_uint32("tokenizer.ggml.padding_token_id", ids["eos"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_string("tokenizer.chat_template",
                 "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


F32_ALWAYS = ("ssm_conv1d.weight",)  # 2-D, but the fork's ssm_conv reads it as f32 (convert_hf_to_gguf keeps it so)

# the output projections of a layer: what it adds to the residual stream (scaled by --noise in an accepting
# target, zero in an accepting drafter)
OUTPUT_PROJECTIONS = ("attn_output.weight", "ssm_out.weight", "ffn_down.weight")


def tensor_dtype(name: str, ne: tuple[int, ...]) -> type:
    """The type a tensor is written in: f32 for 1-D tensors and F32_ALWAYS, else the size's WEIGHT_DTYPE."""
    if len(ne) == 1 or name.endswith(F32_ALWAYS):
        return np.float32
    return WEIGHT_DTYPE


class Tensors:
    """Adds tensors to a writer: random (scale 0.05), ones (norms), ssm_a's negative values; `scale` multiplies
    the output projections (OUTPUT_PROJECTIONS), `set` adds a tensor whose values are given."""

    def __init__(self, w: gguf.GGUFWriter, rng: np.random.Generator, projection_scale: float = 1.0) -> None:
        self.w, self.rng, self.projection_scale = w, rng, projection_scale

    def add(self, name: str, ne: tuple[int, ...], kind: str = "w") -> None:
        """ne is ggml's order (ne0 first); numpy's shape is the reverse."""
        shape = tuple(reversed(ne))
        if kind == "norm":
            data = np.ones(shape, dtype=np.float32)
        elif kind == "a":
            data = -np.exp(self.rng.uniform(-1, 0, size=shape)).astype(np.float32)
        else:
            scale = 0.05 * (self.projection_scale if name.endswith(OUTPUT_PROJECTIONS) else 1.0)
            if scale == 0.0:
                data = np.zeros(shape, dtype=np.float32)
            else:
                data = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
        self.set(name, ne, data)

    def set(self, name: str, ne: tuple[int, ...], data: np.ndarray) -> None:
        assert data.shape == tuple(reversed(ne)), (name, data.shape, ne)
        self.w.add_tensor(name, data.astype(tensor_dtype(name, ne)))


# --kind accepting: the shared direction of every embedding (dimension 0) and how strongly the output head
# reads it as ATTRACTOR. After RMSNorm an embedding's dimension 0 is about sqrt(n_embd) / 1.9 (64: 4.2, 1024:
# 17), so ATTRACTOR's logit is that times ACCEPT_GAIN, against random logits of about 0.05 * sqrt(n_embd)
# spread: a margin of several nats at every size, for the drafter (whose layers add nothing) always.
SHARED = 1.0
ACCEPT_GAIN = 1.0


def embeddings_and_head(rng: np.random.Generator, n_vocab: int, attractor: int) -> tuple[np.ndarray, np.ndarray]:
    """token_embd and output of an accepting pair (numpy shapes [n_vocab, n_embd])."""
    embd = rng.standard_normal((n_vocab, N_EMBD), dtype=np.float32) * np.float32(0.05)
    embd[:, 0] = SHARED
    head = rng.standard_normal((n_vocab, N_EMBD), dtype=np.float32) * np.float32(0.05)
    head[:, 0] = 0.0
    head[attractor, 0] = ACCEPT_GAIN
    return embd, head


def common_hparams(w: gguf.GGUFWriter, arch: str, n_layer: int, kind: str) -> None:
    w.add_string("general.name", f"{arch}-{'tiny' if WEIGHT_DTYPE == np.float32 else 'medium'}-{kind}")
    w.add_uint32(f"{arch}.context_length", CTX)
    w.add_uint32(f"{arch}.embedding_length", N_EMBD)
    w.add_uint32(f"{arch}.block_count", n_layer)
    w.add_uint32(f"{arch}.feed_forward_length", N_FF)
    w.add_uint32(f"{arch}.attention.head_count", N_HEAD)
    w.add_uint32(f"{arch}.attention.head_count_kv", N_HEAD_KV)
    w.add_uint32(f"{arch}.attention.key_length", HEAD_DIM)
    w.add_uint32(f"{arch}.attention.value_length", HEAD_DIM)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{arch}.rope.freq_base", 10000000.0)
    w.add_uint32("general.file_type", 0 if WEIGHT_DTYPE == np.float32 else 1)  # ALL_F32 / MOSTLY_F16


def write_target(path: str, seed: int, kind: str = "random", noise: float = 0.0) -> None:
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, TARGET_ARCH)
    common_hparams(w, TARGET_ARCH, N_LAYER, kind)
    a = TARGET_ARCH
    w.add_uint32(f"{a}.rope.dimension_count", N_ROT)
    w.add_array(f"{a}.rope.dimension_sections", ROPE_SECTIONS)
    w.add_uint32(f"{a}.full_attention_interval", FULL_ATTN_INTERVAL)
    w.add_uint32(f"{a}.ssm.conv_kernel", SSM_CONV)
    w.add_uint32(f"{a}.ssm.state_size", SSM_STATE)
    w.add_uint32(f"{a}.ssm.group_count", SSM_GROUPS)
    w.add_uint32(f"{a}.ssm.time_step_rank", SSM_DT_RANK)
    w.add_uint32(f"{a}.ssm.inner_size", SSM_STATE * SSM_DT_RANK)
    tokens, types, merges, ids = vocab()
    add_tokenizer(w, tokens, types, merges, ids)

    t = Tensors(w, rng, projection_scale=noise if kind == "accepting" else 1.0)
    n_vocab = len(tokens)
    if kind == "accepting":
        embd, head = embeddings_and_head(rng, n_vocab, ids["attractor"])
        t.set("token_embd.weight", (N_EMBD, n_vocab), embd)
        t.add("output_norm.weight", (N_EMBD,), "norm")
        t.set("output.weight", (N_EMBD, n_vocab), head)
    else:
        t.add("token_embd.weight", (N_EMBD, n_vocab))
        t.add("output_norm.weight", (N_EMBD,), "norm")
        t.add("output.weight", (N_EMBD, n_vocab))
    key_dim = SSM_STATE * SSM_GROUPS
    value_dim = SSM_STATE * SSM_DT_RANK
    for i in range(N_LAYER):
        b = f"blk.{i}"
        t.add(f"{b}.attn_norm.weight", (N_EMBD,), "norm")
        t.add(f"{b}.post_attention_norm.weight", (N_EMBD,), "norm")
        if (i + 1) % FULL_ATTN_INTERVAL == 0:  # full attention (query + gate in attn_q)
            t.add(f"{b}.attn_q.weight", (N_EMBD, HEAD_DIM * N_HEAD * 2))
            t.add(f"{b}.attn_k.weight", (N_EMBD, HEAD_DIM * N_HEAD_KV))
            t.add(f"{b}.attn_v.weight", (N_EMBD, HEAD_DIM * N_HEAD_KV))
            t.add(f"{b}.attn_output.weight", (HEAD_DIM * N_HEAD, N_EMBD))
            t.add(f"{b}.attn_q_norm.weight", (HEAD_DIM,), "norm")
            t.add(f"{b}.attn_k_norm.weight", (HEAD_DIM,), "norm")
        else:  # Gated DeltaNet
            t.add(f"{b}.attn_qkv.weight", (N_EMBD, key_dim * 2 + value_dim))
            t.add(f"{b}.attn_gate.weight", (N_EMBD, value_dim))
            t.add(f"{b}.ssm_conv1d.weight", (SSM_CONV, key_dim * 2 + value_dim))
            t.add(f"{b}.ssm_dt.bias", (SSM_DT_RANK,))
            t.add(f"{b}.ssm_a", (SSM_DT_RANK,), "a")
            t.add(f"{b}.ssm_beta.weight", (N_EMBD, SSM_DT_RANK))
            t.add(f"{b}.ssm_alpha.weight", (N_EMBD, SSM_DT_RANK))
            t.add(f"{b}.ssm_norm.weight", (SSM_STATE,), "norm")
            t.add(f"{b}.ssm_out.weight", (value_dim, N_EMBD))
        t.add(f"{b}.ffn_gate.weight", (N_EMBD, N_FF))
        t.add(f"{b}.ffn_down.weight", (N_FF, N_EMBD))
        t.add(f"{b}.ffn_up.weight", (N_EMBD, N_FF))
    finish(w, path)


def write_draft(path: str, seed: int, kind: str = "random") -> None:
    rng = np.random.default_rng(seed + 1)
    w = gguf.GGUFWriter(path, DRAFT_ARCH)
    common_hparams(w, DRAFT_ARCH, DRAFT_LAYERS, kind)
    a = DRAFT_ARCH
    tokens, types, merges, ids = vocab()
    n_features = len(TARGET_LAYER_IDS) * N_EMBD
    w.add_uint32(f"{a}.rope.dimension_count", HEAD_DIM)
    w.add_uint32(f"{a}.dflash.block_size", BLOCK_SIZE)
    w.add_uint32(f"{a}.dflash.mask_token_id", ids["mask"])
    w.add_key_value(f"{a}.dflash.target_layer_ids", TARGET_LAYER_IDS, gguf.GGUFValueType.ARRAY,
                    sub_type=gguf.GGUFValueType.UINT32)  # the loader reads them as uint32
    w.add_uint32(f"{a}.dflash.n_target_features", n_features)
    add_tokenizer(w, tokens, types, merges, ids)

    t = Tensors(w, rng, projection_scale=0.0 if kind == "accepting" else 1.0)
    # token_embd/output are shared from the target at run time: not in the file
    t.add("output_norm.weight", (N_EMBD,), "norm")
    t.add("dflash_fc.weight", (n_features, N_EMBD))
    t.add("dflash_hidden_norm.weight", (N_EMBD,), "norm")
    for i in range(DRAFT_LAYERS):
        b = f"blk.{i}"
        t.add(f"{b}.attn_norm.weight", (N_EMBD,), "norm")
        t.add(f"{b}.post_attention_norm.weight", (N_EMBD,), "norm")
        t.add(f"{b}.attn_q.weight", (N_EMBD, HEAD_DIM * N_HEAD))
        t.add(f"{b}.attn_k.weight", (N_EMBD, HEAD_DIM * N_HEAD_KV))
        t.add(f"{b}.attn_v.weight", (N_EMBD, HEAD_DIM * N_HEAD_KV))
        t.add(f"{b}.attn_output.weight", (HEAD_DIM * N_HEAD, N_EMBD))
        t.add(f"{b}.attn_q_norm.weight", (HEAD_DIM,), "norm")
        t.add(f"{b}.attn_k_norm.weight", (HEAD_DIM,), "norm")
        t.add(f"{b}.ffn_gate.weight", (N_EMBD, N_FF))
        t.add(f"{b}.ffn_down.weight", (N_FF, N_EMBD))
        t.add(f"{b}.ffn_up.weight", (N_EMBD, N_FF))
    finish(w, path)


def finish(w: gguf.GGUFWriter, path: str) -> None:
    """Write to a temporary name in the same folder, then rename: the file is replaced whole."""
    tmp = path + ".tmp"
    w.path = tmp  # type: ignore[attr-defined]
    w.write_header_to_file(tmp)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="fork-models")
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny",
                    help="tiny (0.8 MB, every code path) or medium (about 0.6 GB, for tokens/s)")
    ap.add_argument("--kind", choices=("random", "accepting"), default="random",
                    help="random weights, or a pair whose drafts the target accepts (see above)")
    ap.add_argument("--noise", type=float, default=0.0,
                    help="--kind accepting: scale of the target's layer outputs (0: every draft accepted)")
    args = ap.parse_args(argv)
    if args.noise < 0 or (args.noise and args.kind != "accepting"):
        ap.error("--noise is a scale of 0 or more, for --kind accepting")
    use_size(args.size)
    os.makedirs(args.out, exist_ok=True)
    suffix = args.size if args.kind == "random" else f"{args.size}-accepting"
    if args.noise:
        suffix += f"-noise{args.noise:g}"
    target = os.path.join(args.out, f"qwen35-{suffix}.gguf")
    draft = os.path.join(args.out, f"dflash-draft-{suffix}.gguf")
    write_target(target, args.seed, args.kind, args.noise)
    write_draft(draft, args.seed, args.kind)
    for p in (target, draft):
        print(f"{p} {os.path.getsize(p)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
