"""The hand-made toy hierarchy used across tests (distances worked out by hand in the tests)."""

# root ── A ── a1 (train), a2, a3 ── a31
#      └─ B ── b1 ── b11, b2 (train)
# m has two parents: a2 and b1 (multiple inheritance)
TOY_EDGES = [
    ("root", "A"),
    ("root", "B"),
    ("A", "a1"),
    ("A", "a2"),
    ("A", "a3"),
    ("a3", "a31"),
    ("B", "b1"),
    ("B", "b2"),
    ("b1", "b11"),
    ("a2", "m"),
    ("b1", "m"),
]
TOY_TRAIN = ["a1", "b2"]
