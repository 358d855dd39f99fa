"""The store ledger: what every read of a store accounted for, per source and in one line.

Each source (a tar, shard, folder or parquet file) has a ledger entry
(:func:`~imagenet_zsl.images.scan.new_ledger`); :func:`ledger_totals` adds them up and
:func:`summary_line` says it in one line, printed by ``images count``, ``images coverage`` and
``extract`` alike::

    store: 3 shards, 1,204 images indexed; 1 shard damaged (s-0002.tar: truncated after
    4 members (no end-of-archive blocks)); 2 members skipped (truncated 1, cut-by-damage 1)

A damaged source is never fatal and never silent: its entry says why it stopped and how many
bytes were not read, the summary names it, and the extraction manifest keeps the whole ledger.
"""

from __future__ import annotations

from typing import Any

#: what a source of each layout is called in the summary (singular, plural)
SOURCE_NOUNS = {
    "tars": ("tar", "tars"),
    "wds": ("shard", "shards"),
    "parquet": ("file", "files"),
    "tree": ("folder", "folders"),
    "in21k-p": ("folder", "folders"),
    "flat": ("source", "sources"),
}
#: damaged sources named in the summary line (the others are counted)
SHOWN_DAMAGED = 3


def ledger_problem(entry: dict[str, Any]) -> str | None:
    """Why a ledger entry does not add up (None: it does): ``members`` must equal images +
    metadata + every skip."""
    counted = entry["images"] + entry["metadata"] + sum(entry["skipped"].values())
    if counted != entry["members"]:
        return f"{entry['source']}: {entry['members']} members but {counted} accounted for"
    return None


def ledger_totals(ledger: list[dict[str, Any]]) -> dict[str, Any]:
    """The ledger added up: sources, damaged sources, members, images, metadata, skipped by
    reason, bytes unread."""
    skipped: dict[str, int] = {}
    for entry in ledger:
        for reason, count in entry["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + count
    return {
        "sources": len(ledger),
        "damaged": sum(1 for e in ledger if e["damage"]),
        "members": sum(e["members"] for e in ledger),
        "images": sum(e["images"] for e in ledger),
        "metadata": sum(e["metadata"] for e in ledger),
        "skipped": dict(sorted(skipped.items())),
        "bytes_unread": sum(e["bytes_unread"] for e in ledger),
    }


def _count(n: int, noun: tuple[str, str]) -> str:
    return f"{n:,} {noun[0] if n == 1 else noun[1]}"


def _damaged_text(entry: dict[str, Any]) -> str:
    unread = f", {entry['bytes_unread']:,} bytes unread" if entry["bytes_unread"] else ""
    return f"{entry['source'] or '(the store file)'}: {entry['damage']}{unread}"


def summary_line(
    layout: str, ledger: list[dict[str, Any]], incomplete: list[dict[str, Any]] | None = None
) -> str:
    """The ledger in one line: sources and images indexed, then (when there are any) the damaged
    sources (the first few named), the members skipped by reason, and what the store lacks of
    what it declares (read with ``--allow-incomplete``)."""
    noun = SOURCE_NOUNS.get(layout, ("source", "sources"))
    totals = ledger_totals(ledger)
    parts = [f"store: {_count(totals['sources'], noun)}, {totals['images']:,} images indexed"]
    damaged = [e for e in ledger if e["damage"]]
    if damaged:
        named = "; ".join(_damaged_text(e) for e in damaged[:SHOWN_DAMAGED])
        more = f"; +{len(damaged) - SHOWN_DAMAGED} more in the index" if len(damaged) > SHOWN_DAMAGED else ""
        parts.append(f"{_count(len(damaged), noun)} damaged ({named}{more})")
    skipped = totals["skipped"]
    if skipped:
        shown = ", ".join(f"{reason} {count:,}" for reason, count in skipped.items())
        parts.append(f"{sum(skipped.values()):,} members skipped ({shown})")
    if incomplete:
        first = incomplete[0]["detail"]
        more = f" (+{len(incomplete) - 1} more)" if len(incomplete) > 1 else ""
        parts.append(f"INCOMPLETE, read with --allow-incomplete: {first}{more}")
    return "; ".join(parts)
