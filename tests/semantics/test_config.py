"""The label-curation config on the typed config layer: typos, types and ranges are one-line errors."""

from __future__ import annotations

import typing

import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.semantics.config import VectorFormat, load_label_config
from imagenet_zsl.semantics.word_vectors import FORMATS


@pytest.mark.parametrize(
    "text, message",
    [
        ("lemma_rule: median\n", "lemma_rule = 'median'): Input should be 'mean' or 'first'"),
        (
            "polysemy: {min_confidence: 2}\n",
            "polysemy.min_confidence = 2): Input should be less than or equal to 1",
        ),
        ("polysemy: {temperature: -1}\n", "polysemy.temperature = -1): Input should be greater than 0"),
        ("polysemy: {order_decay: 1.5}\n", "polysemy.order_decay = 1.5)"),
        ("vectors: {source: glove-6b-50d, format: excel}\n", "vectors.format = 'excel'"),
        ("vectors: {dim: 0}\n", "vectors.dim = 0"),
        ("frequency: {min_count: lots}\n", "frequency.min_count = 'lots'): Input should be a valid number"),
        ("frequency: {min_count: -5}\n", "frequency.min_count = -5"),
        ("frequency: {min_zipf: 12}\n", "frequency.min_zipf = 12"),
        ("normalize: maybe\n", "normalize = 'maybe'"),
        ("- a list\n", "config must be a mapping"),
        ("polysemy: [\n", "invalid YAML"),
    ],
)
def test_config_errors(tmp_path, text, message):
    path = tmp_path / "labels.yaml"
    path.write_text(text)
    with pytest.raises(UserInputError) as info:
        load_label_config(path)
    assert message in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "text, key, hint",
    [
        ("vectros: glove-6b-50d\n", "vectros", "vectors"),
        ("frequency: {min_cont: 50}\n", "frequency.min_cont", "min_count"),
        ("polysemy: {temprature: 0.2}\n", "polysemy.temprature", "temperature"),
        ("vectors: {sourse: x.txt}\n", "vectors.sourse", "source"),
    ],
)
def test_typo_keys_suggest_the_closest(tmp_path, text, key, hint):
    path = tmp_path / "labels.yaml"
    path.write_text(text)
    with pytest.raises(UserInputError) as info:
        load_label_config(path)
    message = str(info.value)
    assert message.startswith("unknown key") and f"{path}: {key})" in message
    assert f"did you mean '{hint}'?" in message


def test_numbers_as_yaml_reads_them(tmp_path):
    path = tmp_path / "labels.yaml"
    path.write_text("frequency: {reference_tokens: 3.0e9, min_count: 10}\nvectors: v.txt\npolysemy:\n")
    cfg = load_label_config(path)  # PyYAML reads 3.0e9 as a string; the config layer takes it
    assert cfg.frequency.reference_tokens == 3.0e9 and cfg.frequency.min_count == 10.0
    assert cfg.vectors.source == str(tmp_path / "v.txt")  # relative to the config's folder


def test_vector_formats_match_the_loader():
    assert set(typing.get_args(VectorFormat)) == {"auto", *FORMATS}


def test_shipped_config_is_the_documented_default():
    shipped = load_label_config("configs/labels.yaml")
    default = load_label_config(None)
    assert shipped.as_dict() == {
        **default.as_dict(),
        "frequency": {**default.as_dict()["frequency"], "reference_tokens": 3.0e9},
    }
