"""The typed config layer: unknown keys, wrong types and ranges are one-line errors naming file and key."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import Field

from imagenet_zsl.config import Config, load_config
from imagenet_zsl.errors import UserInputError


class Hops(Config):
    name: str
    kind: Literal["hops"]
    k: Annotated[int, Field(ge=1)] = 1


class Population(Config):
    name: str
    kind: Literal["population"]
    n: Annotated[int, Field(ge=1)]
    most: bool = True


class Recipe(Config):
    train: str = "ilsvrc2012"
    splits: list[Annotated[Hops | Population, Field(discriminator="kind")]]


def _error(tmp_path, text: str) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    with pytest.raises(UserInputError) as info:
        load_config(path, Recipe)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_valid_recipe_is_typed(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("splits:\n  - {name: hop2, kind: hops, k: 2}\n  - {name: mp, kind: population, n: 5}\n")
    recipe = load_config(path, Recipe)
    assert recipe.splits[0].k == 2 and recipe.splits[1].n == 5 and recipe.train == "ilsvrc2012"


def test_top_level_typo_suggests_closest(tmp_path):
    message = _error(tmp_path, "trian: x\nsplits: []\n")
    assert message.startswith("unknown key 'trian'")
    assert "did you mean 'train'?" in message and "allowed: splits, train" in message


def test_typo_inside_a_tagged_union_member(tmp_path):
    message = _error(tmp_path, "splits:\n  - {name: hop2, kind: hops, kk: 2}\n")
    assert "unknown key 'kk'" in message and "splits[0].kk" in message
    assert "did you mean 'k'?" in message and "allowed: k, kind, name" in message


def test_range_type_and_missing(tmp_path):
    assert "splits[0].n = -5" in _error(tmp_path, "splits:\n  - {name: p, kind: population, n: -5}\n")
    assert "splits[0].n = 'lots'" in _error(tmp_path, "splits:\n  - {name: p, kind: population, n: lots}\n")
    assert _error(tmp_path, "splits:\n  - {name: p, kind: population}\n").startswith("missing key")
    assert "kind" in _error(tmp_path, "splits:\n  - {name: p, kind: lists}\n")


def test_bad_yaml_and_not_a_mapping(tmp_path):
    assert _error(tmp_path, "splits: [\n").startswith("invalid YAML")
    assert _error(tmp_path, "- a\n- b\n").startswith("config must be a mapping")


# --------------------------------------------------------------------------- duplicate keys, aliases
def test_duplicate_keys_name_the_key_and_both_lines(tmp_path):
    message = _error(tmp_path, "splits:\n  - name: a\n    kind: hops\n    name: b\n")
    assert "duplicate key 'name' (lines 2 and 4)" in message


def test_duplicate_keys_inside_an_anchored_mapping(tmp_path):
    message = _error(tmp_path, "base: &b {k: 1, k: 2}\nsplits: []\n")
    assert "duplicate key 'k' (lines 1 and 1)" in message


def test_a_merged_key_may_be_overridden():
    from imagenet_zsl.config import parse_recipe_yaml

    text = "d: &d {kind: hops, k: 1}\ne: &e {<<: *d, k: 2}\nf:\n  <<: *e\n  k: 3\n  name: f\n"
    assert parse_recipe_yaml(text)["f"] == {"kind": "hops", "k": 3, "name": "f"}
    assert parse_recipe_yaml("") is None


def _levels(n: int) -> str:
    text = "a0: &a0 [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]\n"
    for i in range(1, n):
        text += f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n"
    return text


def test_alias_expansion_bound():
    """4 levels: E = 11, 111, 1111, 11111 nodes; the document has 1 + 4 keys + 11 + 3 = 19 nodes
    as written and 1 + 4 + 12,344 expanded: 12,330 extra, under 100,000. 5 levels: 123,455 + 6 - 21
    = 123,440 extra, refused."""
    from imagenet_zsl.config import _RecipeYAMLError, parse_recipe_yaml

    assert len(parse_recipe_yaml(_levels(4))["a3"]) == 10
    with pytest.raises(_RecipeYAMLError, match="expand it by 123,440 values"):
        parse_recipe_yaml(_levels(5))


def test_shorten():
    from imagenet_zsl.config import shorten

    assert shorten("abc", 5) == "abc"
    assert shorten("abcdefgh", 5) == "abcde... (3 more characters)"


def test_floats_are_read_as_yaml_1_2_reads_them():
    """PyYAML (YAML 1.1) reads ``1e-3`` and ``1.0e5`` as strings; a recipe means numbers. Other
    scalars keep their YAML 1.1 types, and PyYAML's own safe loader is unchanged."""
    import yaml

    from imagenet_zsl.config import parse_recipe_yaml

    text = "a: [1e-3, 1.0e5, -2E+2, .5e1, +3e0, 10, 0.25, 1e3x, n01440764, .inf, '1e-3']\n"
    assert parse_recipe_yaml(text)["a"] == [
        0.001,
        100000.0,
        -200.0,
        5.0,
        3.0,
        10,
        0.25,
        "1e3x",
        "n01440764",
        float("inf"),
        "1e-3",
    ]
    assert yaml.safe_load("a: 1e-3") == {"a": "1e-3"}


def test_a_validator_message_and_a_key_prefix(tmp_path):
    """``describe_error(prefix=...)`` names the key inside its block (``params.gamma``), and a
    validator's ValueError reads as its own text (no "Value error, " prefix)."""
    from pydantic import ValidationError, field_validator

    from imagenet_zsl.config import describe_error

    class Params(Config):
        gamma: float = 1.0

        @field_validator("gamma")
        @classmethod
        def _small(cls, value: float) -> float:
            if value > 10:
                raise ValueError("gamma above 10 diverges")
            return value

    with pytest.raises(ValidationError) as info:
        Params(gamma=20.0)
    message = describe_error(info.value, Params, {"gamma": 20.0}, "m.yaml", prefix="params.")
    assert message == "invalid value (m.yaml: params.gamma = 20.0): gamma above 10 diverges"
    with pytest.raises(ValidationError) as info:
        Params(gama=1.0)
    message = describe_error(info.value, Params, {"gama": 1.0}, "m.yaml", prefix="params.")
    assert message == "unknown key 'gama' (m.yaml: params.gama): did you mean 'gamma'? allowed: gamma"


def test_shared_fields_copies_the_fields_of_the_same_name_and_given_wins():
    from dataclasses import dataclass

    from imagenet_zsl.config import shared_fields

    @dataclass
    class Options:  # a command's flags: one the target lacks, one of another type
        seed: int = 3
        split: str = "ss"
        out: str = "o"
        grid: tuple[str, ...] = ("a=1,2",)

    @dataclass
    class Params:
        dataset: str
        seed: int = 0
        split: str = "ps"
        grid: dict | None = None

    made = shared_fields(Params, Options(), dataset="CUB", grid={"a": [1, 2]})
    assert made == Params(dataset="CUB", seed=3, split="ss", grid={"a": [1, 2]})
    assert shared_fields(Params, Options(seed=7), dataset="SUN").seed == 7
