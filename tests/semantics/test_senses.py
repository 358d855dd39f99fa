"""Primary meaning: the combination rule by hand, then hand-checked decisions on real ImageNet labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from imagenet_zsl.semantics.senses import (
    PrimarySenseModel,
    _segment_argmax_mask,
    fit_temperature,
    semcor_calibration_words,
)

# (word, the ImageNet class, is it the word's primary meaning?) — checked by hand against dictionaries
HAND_CHECKED = [
    ("cairn", "n07273802", True),  # the stone memorial ...
    ("cairn", "n02096177", False),  # ... not the terrier (Hascoet et al.'s example)
    ("cardigan", "n02963159", True),  # the sweater ...
    ("cardigan", "n02113186", False),  # ... not the Welsh corgi
    ("boxer", "n02108089", False),  # the dog; a boxer is a fighter
    ("tiger", "n02129604", True),  # the cat, not "a fierce or audacious person" (WordNet's sense 1)
    ("monitor", "n01694709", False),  # the lizard; a monitor is a screen
    ("bishop", "n02844056", False),  # the chess piece; a bishop is a clergyman
    ("mouse", "n02330245", True),  # the rodent ...
    ("mouse", "n03793489", False),  # ... not the computer device
    ("apple", "n07739125", True),  # the fruit, not the tree
    ("pitcher", "n03950228", False),  # the jug; a pitcher throws the ball
    ("jaguar", "n02128925", True),  # monosemous in WordNet
]


@pytest.fixture(scope="module")
def evidence(sense_model) -> pd.DataFrame:
    return sense_model.evidence({w for w, _, _ in HAND_CHECKED})


@pytest.mark.parametrize("word, wnid, primary", HAND_CHECKED)
def test_hand_checked_primary_meanings(evidence, word, wnid, primary):
    row = evidence[(evidence["word"] == word) & (evidence["wnid"] == wnid)]
    assert len(row) == 1
    assert bool(row["is_primary"].iloc[0]) is primary
    confidence = float(row["posterior"].iloc[0])
    assert (confidence > 0.5) if primary else (confidence < 0.5)


def test_one_primary_per_word_and_posteriors_sum_to_one(evidence):
    assert (evidence.groupby("word")["is_primary"].sum() == 1).all()
    np.testing.assert_allclose(evidence.groupby("word")["posterior"].sum(), 1.0)
    assert evidence.loc[evidence["word"] == "jaguar", "posterior"].tolist() == [1.0]


def test_wordnet_prior_by_hand(evidence):
    """(n_i + prior_strength * o_i) / (N + prior_strength), o ∝ 0.5 ** rank, prior_strength 1;
    a word without any SemCor tag gets a flat prior (the order of untagged senses is arbitrary)."""
    cairn = evidence[evidence["word"] == "cairn"]
    assert cairn["semcor_count"].tolist() == [0, 0]
    np.testing.assert_allclose(cairn["p_wordnet"], [1 / 2, 1 / 2])
    tiger = evidence[evidence["word"] == "tiger"]  # SemCor: 1 tag each
    assert tiger["semcor_count"].tolist() == [1, 1]
    np.testing.assert_allclose(tiger["p_wordnet"], [(1 + 2 / 3) / 3, (1 + 1 / 3) / 3])


def test_embedding_overrules_wordnet_order_without_counts(evidence):
    monitor = evidence[evidence["word"] == "monitor"].set_index("sense_rank")
    assert monitor["semcor_count"].sum() == 0
    assert monitor.loc[1, "p_wordnet"] == monitor["p_wordnet"].max()  # WordNet alone: the proctor
    primary = monitor[monitor["is_primary"]].index.tolist()
    assert primary != [1]
    # a display/monitoring-equipment sense, chosen on the embedding alone
    assert monitor.loc[primary[0], "wnid"] in {"n03782190", "n03782006", "n03781787"}


def test_wordnet_only_without_vectors(nouns):
    model = PrimarySenseModel(None, nouns)
    frame = model.evidence(["cairn", "monitor"])
    assert frame["similarity"].isna().all()
    first = frame[frame["is_primary"]]
    assert first["sense_rank"].tolist() == [1, 1]  # sense order decides
    np.testing.assert_allclose(frame["posterior"], frame["p_wordnet"])


def test_segment_argmax_ties_go_to_the_earlier_sense():
    values = np.array([0.2, 0.5, 0.5, 0.9, 0.1, 0.3, 0.3])
    starts = np.array([0, 3, 5])
    assert _segment_argmax_mask(values, starts).tolist() == [False, True, False, True, False, True, False]


def test_parameters_are_validated(nouns):
    with pytest.raises(ValueError, match="temperature"):
        PrimarySenseModel(None, nouns, temperature=0)
    with pytest.raises(ValueError, match="unknown"):
        PrimarySenseModel(None, nouns, temprature=0.1)


def test_embedding_beats_chance_on_semcor_words(sense_model):
    """Where SemCor names the most frequent sense, the embedding alone finds it far above chance,
    and the fitted temperature is the documented default."""
    words = semcor_calibration_words(sense_model)
    assert len(words) > 1000
    fit = fit_temperature(sense_model, words)
    assert fit["accuracy"] > fit["chance"] + 0.15
    assert fit["temperature"] == pytest.approx(sense_model.params["temperature"], rel=0.1)
