"""Population splits (Xian et al.): the N most / least populated candidates by image count.

Tie-break (documented, deterministic): image count, then wnid ascending. For "most" that is
count descending then wnid ascending; for "least", count ascending then wnid ascending. Classes
with zero images are never chosen for "least" (they have no test images).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from imagenet_zsl.errors import UserInputError


def population_split(candidates: Sequence[str], counts: Mapping[str, int], n: int, most: bool) -> list[str]:
    """Sorted wnids of the ``n`` most (or least) populated candidates."""
    eligible = [w for w in candidates if counts.get(w, 0) > 0]
    if n > len(eligible):
        raise UserInputError(f"population split asks for {n} classes but only {len(eligible)} have images")
    if most:
        ranked = sorted(eligible, key=lambda w: (-counts[w], w))
    else:
        ranked = sorted(eligible, key=lambda w: (counts[w], w))
    return sorted(ranked[:n])
