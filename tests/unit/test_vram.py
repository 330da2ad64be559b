"""Issue 50 item 2: the GPU memory of a llama-server set-up, from the GGUF headers of its models.

The header reader (core/ggufheader.py) is checked against the `gguf` package's own reader on the fork's
tiny models (scripts/fork_models.py: a qwen35 hybrid target and a DFlash drafter) and on hostile files;
the estimate (plan/vram.py) against sums made here by hand from the fork's rules; `buildkit run` prints
it and warns before starting a server that does not fit."""

from __future__ import annotations

import importlib.util
import os
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner

from buildkit.cli.main import main
from buildkit.core.errors import ConfigError, ModelError
from buildkit.core.ggufheader import GGML_TYPES, ArrayLength, read_header, row_bytes
from buildkit.plan.llamaargs import parse_server_args
from buildkit.plan.starter import DFLASH_PROFILE
from buildkit.plan.vram import CTX_PAD, GiB, estimate, shape_of

ROOT = Path(__file__).resolve().parents[2]


def fork_models():
    spec = importlib.util.spec_from_file_location("fork_models", ROOT / "scripts" / "fork_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("fork-models")
    fork_models().main(["--out", str(out)])
    return out / "qwen35-tiny.gguf", out / "dflash-draft-tiny.gguf"


def component(found, name):
    return next(c for c in found.components if c.name == name)


# ------------------------------------------------------------------------------------------- the reader

@pytest.mark.parametrize("which", [0, 1])
def test_the_header_is_what_the_gguf_package_reads(models, which):
    path = models[which]
    ours, theirs = read_header(path), gguf.GGUFReader(path)
    assert [(t.name, t.shape, t.type_id, t.nbytes) for t in ours.tensors] == [
        (t.name, tuple(int(n) for n in t.shape), int(t.tensor_type), int(t.n_bytes)) for t in theirs.tensors]
    for field in theirs.fields.values():
        if field.name.startswith("GGUF."):
            continue
        value = ours.metadata[field.name]
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            assert (value.length if isinstance(value, ArrayLength) else len(value)) == len(field.data)
        elif field.types[0] == gguf.GGUFValueType.STRING:
            assert value == field.contents()
        else:
            assert value == pytest.approx(field.contents())


def test_the_type_table_is_the_forks_and_agrees_with_gguf():
    for kind, (block, size) in gguf.GGML_QUANT_SIZES.items():
        if kind.name == "Q8_1":  # gguf 0.19 says 40 bytes; block_q8_1 is two halves and 32 int8: 36
            assert (GGML_TYPES[kind.value].block, GGML_TYPES[kind.value].block_bytes) == (32, 36)
            continue
        assert (GGML_TYPES[kind.value].block, GGML_TYPES[kind.value].block_bytes) == (block, size), kind
    # the fork's TurboQuant KV types, from ggml-common.h's block_turbo* structs
    assert row_bytes("turbo4", 128) == 66 and row_bytes("turbo3", 128) == 56 and row_bytes("turbo2", 128) == 40
    assert row_bytes("q8_0", 128) == 136 and row_bytes("f16", 128) == 256


def _header(*, magic=b"GGUF", version=3, n_tensors=0, n_kv=1, body=b""):
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv) + body


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


@pytest.mark.parametrize("data,message", [
    (b"GGML" + bytes(20), "does not start with GGUF"),
    (_header(version=1), "GGUF version 1"),
    (_header(version=3 << 24), "GGUF version 50331648"),
    (_header()[:10], "it ends inside its header"),
    (_header(n_kv=1 << 40), "1,099,511,627,776 metadata keys"),
    (_header(body=struct.pack("<Q", 1 << 60)), "a string of 1,152,921,504,606,846,976 bytes"),
    (_header(body=_string(b"k") + struct.pack("<IIQ", 9, 9, 1)), "an array of arrays"),
    (_header(body=_string(b"k") + struct.pack("<IIQ", 9, 4, 1 << 40)), "1,099,511,627,776 array elements"),
    (_header(body=_string(b"k") + struct.pack("<I", 77)), "a value of type 77"),
    (_header(n_tensors=1, n_kv=0, body=_string(b"w") + struct.pack("<I", 9)), "tensor 'w' has 9 dimensions"),
    (_header(n_tensors=1, n_kv=0, body=_string(b"w") + struct.pack("<IQIQ", 1, 32, 99, 0)), "type 99"),
    (_header(n_tensors=1, n_kv=0, body=_string(b"w") + struct.pack("<IQIQ", 1, 33, 8, 0)), "not whole blocks"),
])
def test_a_file_that_is_not_a_gguf_header_is_one_line(tmp_path, data, message):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(ModelError) as caught:
        read_header(path)
    assert message in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_fifo_or_a_missing_file_is_refused_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "fifo.gguf")
    with pytest.raises(ModelError, match="not a regular file"):
        read_header(tmp_path / "fifo.gguf")
    with pytest.raises(ModelError, match="does not exist"):
        read_header(tmp_path / "none.gguf")


def test_a_long_array_keeps_its_length_and_the_reader_stays_in_its_bounds(tmp_path):
    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_token_list([f"t{i}" for i in range(20000)])
    writer.add_array("llama.attention.head_count_kv", [0, 8, 0, 8])
    writer.add_tensor("blk.0.ffn_up.weight", np.zeros((4, 256), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    header = read_header(path)
    assert header.metadata["tokenizer.ggml.tokens"] == ArrayLength(8, 20000)
    assert header.metadata["llama.attention.head_count_kv"] == [0, 8, 0, 8]
    assert header.tensors[0].nbytes == 4 * 256 * 2


# ----------------------------------------------------------------------------------------- the estimate

def test_the_dflash_profile_on_the_forks_hybrid_target(models):
    target, draft = (read_header(p) for p in models)
    fm = fork_models()
    settings = parse_server_args(DFLASH_PROFILE["args"])
    assert (settings.ctx, settings.ctx_draft, settings.ubatch, settings.parallel) == (32000, 256, 64, 1)
    found = estimate(target, settings, draft)
    names = [c.name for c in found.components]
    assert names == ["target weights", "drafter weights", "KV cache", "recurrent state", "DFlash buffers",
                     "compute buffers", "CUDA context"]
    # weights: every tensor but the input layer's (token_embd; the drafter's fc and hidden norm)
    by_name = {t.name: t.n_bytes for t in gguf.GGUFReader(models[0]).tensors}
    assert component(found, "target weights").bytes == sum(by_name.values()) - by_name["token_embd.weight"]
    d_names = {t.name: t.n_bytes for t in gguf.GGUFReader(models[1]).tensors}
    assert component(found, "drafter weights").bytes == sum(
        n for name, n in d_names.items() if not name.startswith(("dflash_fc.", "dflash_hidden_norm.")))
    # KV: only the full-attention layers (every FULL_ATTN_INTERVAL-th), f16, 32,000 cells (already a multiple of 256)
    attention = fm.N_LAYER // fm.FULL_ATTN_INTERVAL
    row = fm.HEAD_DIM * fm.N_HEAD_KV * 2
    assert component(found, "KV cache").bytes == attention * 32000 * 2 * row
    # the recurrent state: conv (d_conv - 1) x (d_inner + 2 groups x d_state) and d_state x d_inner, f32, one slot
    d_inner = fm.SSM_STATE * fm.SSM_DT_RANK
    per_layer = (fm.SSM_CONV - 1) * (d_inner + 2 * fm.SSM_GROUPS * fm.SSM_STATE) + fm.SSM_STATE * d_inner
    assert component(found, "recurrent state").bytes == (fm.N_LAYER - attention) * per_layer * 4
    assert component(found, "DFlash buffers").bytes >= 2 * 512 * len(fm.TARGET_LAYER_IDS) * fm.N_EMBD * 4
    assert found.total == sum(c.bytes for c in found.components)


@pytest.mark.parametrize("types,row", [
    (("q8_0", "q8_0"), 2 * row_bytes("q8_0", 32)),
    (("turbo4", "turbo4"), 2 * row_bytes("turbo4", 2 * 128)),   # each 16-value head padded to 128
    (("turbo3", "f16"), row_bytes("turbo3", 2 * 128) + 64),
])
def test_the_kv_cache_at_the_profiles_context_for_each_type(models, types, row):
    target = read_header(models[0])
    args = [*DFLASH_PROFILE["args"], "-ctk", types[0], "-ctv", types[1], "-c", "40000"]
    found = estimate(target, parse_server_args(args))
    cells = -(-40000 // CTX_PAD) * CTX_PAD
    assert cells == 40192 and component(found, "KV cache").bytes == 2 * cells * row


def test_layers_not_offloaded_leave_their_weights_and_cache_on_the_host(models):
    target = read_header(models[0])
    shape = shape_of(target)
    assert shape.recurrent == (True, False, True, False)
    found = estimate(target, parse_server_args(["-ngl", "2", "-c", "4096", "-np", "1"]))
    tensors = {t.name: t.nbytes for t in target.tensors}
    only_last = sum(n for name, n in tensors.items() if name.startswith("blk.3.")) + tensors["output.weight"] \
        + tensors["output_norm.weight"]
    assert component(found, "target weights").bytes == only_last  # -ngl 2: layer 3 and the output layer
    assert component(found, "KV cache").bytes == 4096 * 2 * 64     # layer 3 only
    assert "1 of 4 layers" in component(found, "target weights").detail


def test_the_sum_is_printed_one_line_a_component(models):
    target, draft = (read_header(p) for p in models)
    lines = estimate(target, parse_server_args(DFLASH_PROFILE["args"]), draft).lines(24 * GiB)
    assert lines[-1].split()[0] == "sum" and lines[-1].endswith("of the GPU's 24.00 GiB")
    assert [ln.split()[0] for ln in lines[:3]] == ["target", "drafter", "KV"]


def test_unset_options_are_the_forks_defaults_and_said():
    settings = parse_server_args([])
    assert (settings.ctx, settings.ubatch, settings.parallel, settings.cache_k) == (None, 512, 4, "f16")
    assert any("-ngl" in n for n in settings.notes) and any("-np" in n for n in settings.notes)
    assert parse_server_args(["--ctx-size=8192", "-ngl", "all", "-fa", "off"]).ctx == 8192
    with pytest.raises(ConfigError, match="the fork's KV cache types are"):
        parse_server_args(["-ctk", "q7"])


def test_run_warns_before_starting_a_server_that_does_not_fit(tmp_path, models, monkeypatch):
    """The estimate goes to stderr before the docker run line; over --gpu-memory it is a warning."""
    from fakeengine import FakeEngine

    from buildkit.engine.current import use_engine

    monkeypatch.chdir(tmp_path)
    from buildkit.plan.starter import toml_value

    (tmp_path / "buildkit.toml").write_text("schema_version = 1\n[profiles.dflash]\ngpus = \"all\"\n"
                                            f"needs_draft = true\nargs = {toml_value(DFLASH_PROFILE['args'])}\n")
    engine = FakeEngine()
    with use_engine(engine):
        result = CliRunner().invoke(main, ["run", "--profile", "dflash", "--image", "x", "--model", str(models[0]),
                                           "--model-draft", str(models[1]), "--gpu-memory", "0.25"])
    out = result.stderr if hasattr(result, "stderr") else result.output
    assert "GPU memory, estimated from the models' GGUF headers" in out
    warning = out.index("warning: the estimate")
    assert warning < out.index("+ fake-docker run") and engine.calls[-1][0] == "attach", out


def test_run_starts_a_server_whose_model_is_not_a_gguf_it_can_read(tmp_path, monkeypatch):
    """No estimate is no reason not to start: one line says why, and the server starts."""
    from fakeengine import FakeEngine

    from buildkit.engine.current import use_engine

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    engine = FakeEngine()
    with use_engine(engine):
        result = CliRunner().invoke(main, ["run", "--image", "x", "--model", "m.gguf", "--gpus", "all"])
    assert result.exit_code == 0, result.output
    assert "GPU memory not estimated:" in result.output and engine.calls[-1][0] == "attach"
