"""scripts/fork_models.py: the fork's qwen35 + dflash-draft test models, read back the way the fork loads them.

The fork's loader takes what convert_hf_to_gguf writes: 1-D tensors (norms, biases, ssm_a) and ssm_conv1d in
f32 whatever the file's type, since its ops refuse others (`binary_op: unsupported types: dst: f32, src0: f32,
src1: f16` at warm-up, `GGML_ASSERT(src1->nb[0] == sizeof(float))` in ssm_conv); the medium writer had them in
f16. Its tokens must decode to text, or the server's output parser answers HTTP 500. And the accepting pair
must predict its attractor token wherever its layers add nothing, or no draft is ever accepted.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fm(monkeypatch):
    """A fresh copy of the script as a module (its shape constants are module globals)."""
    spec = importlib.util.spec_from_file_location("fork_models_under_test", ROOT / "scripts" / "fork_models.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def f16_tiny(fm) -> None:
    """The medium size's types on the tiny shape: the medium's rule, written in milliseconds."""
    fm.use_size("tiny")
    fm.WEIGHT_DTYPE = np.float16


# the fork's own rule: what its ops take of each tensor (GGML types by name)
def fork_accepts(name: str, ttype: object, n_dims: int, file_type: int) -> bool:
    if n_dims == 1 or name.endswith("ssm_conv1d.weight"):
        return ttype == gguf.GGMLQuantizationType.F32
    return ttype == (gguf.GGMLQuantizationType.F16 if file_type == 1 else gguf.GGMLQuantizationType.F32)


def tensor_types(path: Path) -> tuple[int, dict[str, tuple[object, int]]]:
    reader = gguf.GGUFReader(str(path))
    file_type = int(reader.fields["general.file_type"].parts[-1][0])
    return file_type, {t.name: (t.tensor_type, len(t.shape)) for t in reader.tensors}


@pytest.mark.parametrize("size", ["tiny", "f16"])
@pytest.mark.parametrize("kind", ["random", "accepting"])
def test_every_tensor_has_a_type_the_forks_ops_take(fm, tmp_path, size, kind):
    if size == "f16":
        f16_tiny(fm)
    else:
        fm.use_size("tiny")
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    fm.write_target(str(target), 37, kind, 0.5 if kind == "accepting" else 0.0)
    fm.write_draft(str(draft), 37, kind)
    for path in (target, draft):
        file_type, types = tensor_types(path)
        assert file_type == (1 if size == "f16" else 0)
        wrong = {n: (str(t), d) for n, (t, d) in types.items() if not fork_accepts(n, t, d, file_type)}
        assert not wrong, f"{path.name}: {wrong}"
        assert any(d == 1 for _, d in types.values()) and any(n.endswith("ssm_conv1d.weight") for n in types) \
            or path == draft  # the target has both kinds the rule is about


def test_every_token_decodes_to_text(fm, tmp_path):
    fm.use_size("tiny")
    fm.write_target(str(tmp_path / "t.gguf"), 37)
    reader = gguf.GGUFReader(str(tmp_path / "t.gguf"))
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode() for i in field.data]
    types = [int(reader.fields["tokenizer.ggml.token_type"].parts[i][0])
             for i in reader.fields["tokenizer.ggml.token_type"].data]
    decode = {c: b for b, c in enumerate(fm.byte_to_unicode())}
    for token, ttype in zip(tokens, types, strict=True):
        if ttype == 3:  # control: decodes to nothing
            continue
        raw = bytes(decode[c] for c in token)
        text = raw.decode("utf-8")  # raises on a byte that is not text
        assert text.isprintable() or text in ("\n", "\t") or text.strip().isprintable(), repr(text)
    assert fm.ATTRACTOR in tokens and "Ċ" in tokens  # " the" and the newline the loader looks up


def rms_norm(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-6)


@pytest.mark.parametrize("size", ["tiny", "medium"])
def test_the_accepting_pair_predicts_the_attractor_after_every_token(fm, size):
    """What the drafter computes (its layers add nothing), and the target at --noise 0: RMSNorm of the token's
    embedding, then the shared head. Its argmax must be the attractor for every token, with a margin that
    a float16 matrix product cannot flip."""
    fm.use_size(size)
    tokens, _, _, ids = fm.vocab()
    embd, head = fm.embeddings_and_head(np.random.default_rng(37), len(tokens), ids["attractor"])
    logits = rms_norm(embd.astype(np.float16).astype(np.float32)) @ head.astype(np.float16).astype(np.float32).T
    assert (logits.argmax(axis=1) == ids["attractor"]).all()
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0]).min() > 3.0


def test_the_accepting_drafter_adds_nothing_and_the_noise_scales_the_target(fm, tmp_path):
    fm.use_size("tiny")
    fm.write_target(str(tmp_path / "t0.gguf"), 37, "accepting", 0.0)
    fm.write_target(str(tmp_path / "t1.gguf"), 37, "accepting", 0.5)
    fm.write_draft(str(tmp_path / "d.gguf"), 37, "accepting")

    def projections(path: Path) -> list[np.ndarray]:
        reader = gguf.GGUFReader(str(path))
        return [np.asarray(t.data) for t in reader.tensors if t.name.endswith(fm.OUTPUT_PROJECTIONS)]

    assert all(not p.any() for p in projections(tmp_path / "d.gguf"))
    assert all(not p.any() for p in projections(tmp_path / "t0.gguf"))
    noisy = projections(tmp_path / "t1.gguf")
    assert noisy and all(0.01 < float(p.std()) < 0.05 for p in noisy)  # 0.5 x the random weights' 0.05
