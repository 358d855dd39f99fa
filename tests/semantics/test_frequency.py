"""Label frequency: wordfreq on real words, user count tables, the Hascoet threshold, bad tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.semantics.frequency import (
    CountTableFrequencies,
    WordfreqFrequencies,
    rare_threshold,
    zipf_from_count,
)


def test_hascoet_threshold_is_50_per_wikipedia():
    freq = WordfreqFrequencies("en")
    # 50 occurrences in 3e9 words = 16.7 per billion = Zipf log10(16.67)
    assert rare_threshold(freq) == pytest.approx(math.log10(50 / 3.0), abs=1e-9)
    assert rare_threshold(freq, min_zipf=2.5) == 2.5
    assert rare_threshold(freq, min_count=None) == 0.0


def test_wordfreq_on_real_labels():
    import wordfreq

    freq = WordfreqFrequencies("en")
    zipf = freq.zipf(["dog", "cairn", "cairn_terrier", "chuckwalla", "qqqxxyzzz"])
    assert zipf[0] > 5 > zipf[1] > 2  # a common and a mid-frequency word
    # underscores read as spaces
    assert zipf[2] == pytest.approx(wordfreq.zipf_frequency("cairn terrier", "en"))
    assert zipf[2] < zipf[1]  # a phrase is rarer than its rarest word
    assert zipf[4] == 0  # never seen
    threshold = rare_threshold(freq)
    assert zipf[3] < threshold < zipf[1]  # chuckwalla (a lizard) is rare, cairn is not


def test_count_table_and_phrase_rule(tmp_path):
    path = tmp_path / "counts.tsv"
    path.write_text(
        "word\tcount\n# comment\nCairn\t40\ncairn\t60\nterrier\t300\nsea bass\t7\nsea\t1000\nbass\t100\n"
    )
    table = CountTableFrequencies.read(path)
    assert table.total == 1507
    assert table.counts["cairn"] == 100  # case variants summed
    zipf = table.zipf(["cairn", "cairn_terrier", "sea_bass", "dodo"])
    assert zipf[0] == pytest.approx(zipf_from_count(100, 1507))
    assert zipf[1] == pytest.approx(zipf_from_count(1 / (1 / 100 + 1 / 300), 1507))  # 1/f = sum 1/f_i
    assert zipf[2] == pytest.approx(zipf_from_count(7, 1507))  # the phrase itself is counted
    assert zipf[3] == 0
    # min_count applies to the table's own counts: cairn (100) is frequent at 100, rare at 101
    for min_count, rare in ((100, False), (101, True)):
        threshold = rare_threshold(table, min_count=min_count)
        assert bool(zipf[0] < threshold - 1e-12) is rare
    assert np.all(np.isfinite(zipf))


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "cairn\t10\nterrier\tmany\n",
            r"counts\.tsv:2: count 'many' of 'terrier' is not a non-negative integer",
        ),
        ("cairn\t10\nterrier\t5\t7\n", r"counts\.tsv:2: expected 'word<TAB>count'"),
        ("cairn\t10\n\t5\n", r"counts\.tsv:2: expected 'word<TAB>count'"),
        ("cairn\t-3\n", r"counts\.tsv:1: count '-3'"),
        ("cairn\t0\n", r"counts\.tsv: the frequency table holds no counts"),
    ],
)
def test_bad_tables_name_file_and_line(tmp_path, body, message):
    path = tmp_path / "counts.tsv"
    path.write_text(body)
    with pytest.raises(UserInputError, match=message):
        CountTableFrequencies.read(path)


def test_table_not_utf8(tmp_path):
    path = tmp_path / "counts.tsv"
    path.write_bytes(b"caf\xe9\t3\n")
    with pytest.raises(UserInputError, match=r"counts\.tsv: not UTF-8"):
        CountTableFrequencies.read(path)
