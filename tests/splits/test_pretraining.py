"""Pretraining label sets: timm's packaged lists, tags parsed into label sets, web data flagged."""

from __future__ import annotations

import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.splits.pretraining import label_set, pretraining_of


def test_packaged_label_sets_have_their_published_sizes():
    sizes = {name: len(label_set(name)) for name in ("in1k", "in12k", "in21k-p", "in21k-p-w21", "in22k")}
    assert sizes == {"in1k": 1000, "in12k": 11821, "in21k-p": 11221, "in21k-p-w21": 10450, "in22k": 21841}
    assert "n02084071" in label_set("in22k")  # dog, a fall11 synset


@pytest.mark.parametrize(
    ("model", "sets", "web"),
    [
        ("resnet50.a1_in1k", ("in1k",), False),
        ("vit_base_patch16_224.augreg_in21k_ft_in1k", ("in21k", "in1k"), False),
        ("convnext_base.fb_in22k_ft_in1k", ("in22k", "in1k"), False),
        ("tresnet_m.miil_in21k_ft_in1k", ("in21k-p", "in1k"), False),
        ("vit_base_patch16_clip_224.openai", (), True),
        ("convnext_base.clip_laion2b_augreg_ft_in12k_in1k", ("in12k", "in1k"), True),
        ("ViT-B-32/laion2b_s34b_b79k", (), True),
        ("resnet50", (), False),
    ],
)
def test_tags_map_to_label_sets(model, sets, web):
    info = pretraining_of(model)
    assert (info.label_sets, info.web_data) == (sets, web)
    assert (info.wnids is None) == (not sets)


def test_user_list_and_unknown_name(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text("n02084071\nn01443537\n")
    assert label_set(str(path)) == {"n02084071", "n01443537"}
    with pytest.raises(UserInputError, match="unknown pretraining label set"):
        label_set("in99k")
