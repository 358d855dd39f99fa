"""Real text encoders with tiny random weights: open_clip's text tower and a sentence-transformers BERT.

Nothing is downloaded: the tiny models are built here, saved to a temporary folder and loaded back
through the same code path as a user's checkpoint (``--weights``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.semantics.encode import encode_class_vectors
from imagenet_zsl.semantics.text_encoders import TEXT_ENCODERS, create_text_encoder

torch = pytest.importorskip("torch")

TEXTS = ["a photo of a cairn.", "a photo of a cairn terrier.", "dog"]
CLASSES = ["n02096177", "n07273802"]
TINY_CLIP = {
    "embed_dim": 8,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 16, "patch_size": 16, "head_width": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 16, "heads": 2, "layers": 1},
}


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    """(architecture name, checkpoint path) of a random-initialised tiny open_clip model."""
    open_clip = pytest.importorskip("open_clip", reason="open_clip_torch is not installed")
    folder = tmp_path_factory.mktemp("clip")
    (folder / "zsl-tiny-clip.json").write_text(json.dumps(TINY_CLIP))
    open_clip.add_model_config(folder / "zsl-tiny-clip.json")
    torch.manual_seed(0)
    model = open_clip.create_model("zsl-tiny-clip", pretrained=None)
    checkpoint = folder / "tiny.pt"
    torch.save(model.state_dict(), checkpoint)
    return "zsl-tiny-clip", checkpoint


@pytest.fixture(scope="module")
def tiny_sentence(tmp_path_factory):
    """A sentence-transformers folder: random 1-layer BERT (16-d) + mean pooling."""
    pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizer

    base = tmp_path_factory.mktemp("bert")
    words = "a photo of cairn terrier dog the . , stone mound".split()
    (base / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    BertTokenizer(str(base / "vocab.txt")).save_pretrained(base)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(words) + 5,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(base)
    folder = tmp_path_factory.mktemp("sentence") / "tiny-st"
    model = SentenceTransformer(modules=[Transformer(str(base)), Pooling(16, "mean")])
    model.save(str(folder))
    return folder


def test_registry_names_the_kinds():
    assert {"clip", "sentence"} <= set(TEXT_ENCODERS.names())
    with pytest.raises(UserInputError, match="did you mean 'clip'"):
        create_text_encoder("clp:ViT-B-32/openai")
    with pytest.raises(UserInputError, match="KIND:MODEL"):
        create_text_encoder("ViT-B-32")


def test_clip_text_tower_shapes_and_determinism(tiny_clip):
    arch, checkpoint = tiny_clip
    encoder = create_text_encoder(f"clip:{arch}", weights=checkpoint, device="cpu")
    out = encoder.encode(TEXTS)
    assert out.shape == (3, 8) and out.dtype == np.float32 and np.isfinite(out).all()
    again = create_text_encoder(f"clip:{arch}", weights=checkpoint, device="cpu").encode(TEXTS)
    np.testing.assert_array_equal(out, again)
    assert not np.allclose(out[0], out[1])
    vectors = encode_class_vectors(encoder, CLASSES, ["a photo of a {}.", "{}"])
    assert vectors.matrix.shape == (2, 8)
    np.testing.assert_allclose(np.linalg.norm(vectors.matrix, axis=1), 1, atol=1e-5)


def test_clip_never_downloads(tiny_clip):
    arch, _ = tiny_clip
    with pytest.raises(UserInputError, match="--weights"):
        create_text_encoder(f"clip:{arch}")  # no tag, no weights
    with pytest.raises(UserInputError, match="unknown open_clip architecture"):
        create_text_encoder("clip:ViT-Q-99/openai")


def test_clip_encode_through_the_cli(tiny_clip, tmp_path, capsys):
    arch, checkpoint = tiny_clip
    classes = tmp_path / "classes.txt"
    classes.write_text("\n".join(CLASSES) + "\n")
    out = tmp_path / "clip.npz"
    argv = ["labels", "encode", "--encoder", f"clip:{arch}", "--weights", str(checkpoint)]
    assert main([*argv, "--classes", str(classes), "--device", "cpu", "--out", str(out)]) == 0
    vectors = ClassVectors.load(out)
    assert vectors.wnids == CLASSES and vectors.dim == 8


def test_sentence_model_shapes_normalisation_and_determinism(tiny_sentence):
    encoder = create_text_encoder(f"sentence:{tiny_sentence}", device="cpu")
    out = encoder.encode(TEXTS)
    assert out.shape == (3, 16) and out.dtype == np.float32
    same = create_text_encoder("sentence:tiny", weights=tiny_sentence, device="cpu").encode(TEXTS)
    np.testing.assert_array_equal(out, same)
    vectors = encode_class_vectors(encoder, CLASSES, ["a photo of a {}."], batch_size=1)
    np.testing.assert_allclose(np.linalg.norm(vectors.matrix, axis=1), 1, atol=1e-5)
    again = encode_class_vectors(encoder, CLASSES, ["a photo of a {}."], batch_size=8)
    np.testing.assert_allclose(vectors.matrix, again.matrix, atol=1e-5)


def test_sentence_model_missing_offline(tmp_path):
    pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
    with pytest.raises(UserInputError, match="offline"):
        create_text_encoder(f"sentence:{tmp_path / 'nowhere'}", device="cpu")
