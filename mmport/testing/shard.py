"""Split a manifest's ports into N shards, the same way on every machine of a CI matrix.

With recorded durations the split is balanced by them (longest first, each
port to the lightest shard); without, it is round robin over the sorted
labels. Either way it depends only on the labels and the durations file, so
N machines that share both (the file is committed) split alike and together
run every port exactly once::

    >>> shard_labels(["c", "a", "b"], Shard(1, 2))
    ['a', 'c']
    >>> shard_labels(["c", "a", "b"], Shard(1, 2), {"a": 60.0, "b": 5.0, "c": 5.0})
    ['a']

Timings are never read from pytest's own cache for the split: each CI
machine has its own, and shards drawn from different timings could skip a
port or run one twice.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Shard", "read_durations", "shard_labels", "write_durations"]

SHARD_SPEC = re.compile(r"^(?P<index>\d+)/(?P<count>\d+)$")


@dataclass(frozen=True)
class Shard:
    """The ``index``-th (from 1) of ``count`` shards."""

    index: int
    count: int

    @classmethod
    def parse(cls, spec: str) -> Shard:
        """``"2/4"`` as ``Shard(2, 4)``; a ValueError that says what to write for anything else."""
        found = SHARD_SPEC.match(spec.strip())
        if found is None or not 1 <= int(found["index"]) <= int(found["count"]):
            raise ValueError(
                f"--mmport-shard {spec!r} is not K/N with 1 <= K <= N; write e.g. --mmport-shard 1/2"
            )
        return cls(int(found["index"]), int(found["count"]))


def shard_labels(
    labels: list[str], shard: Shard, durations: dict[str, float] | None = None
) -> list[str]:
    """The labels of ``shard``, in their given order: balanced by ``durations`` when any apply, else round robin."""
    if durations and any(label in durations for label in labels):
        owner = _balanced(labels, shard.count, durations)
    else:
        owner = {
            label: index % shard.count for index, label in enumerate(sorted(labels))
        }
    return [label for label in labels if owner[label] == shard.index - 1]


def _balanced(
    labels: list[str], count: int, durations: dict[str, float]
) -> dict[str, int]:
    """Greedy longest-first: each port, slowest first, goes to the shard with the least time so far.

    A port without a recorded duration counts as the mean of those recorded.
    Ties break by label and by shard number, so the split is deterministic.
    """
    known = [durations[label] for label in labels if label in durations]
    mean = sum(known) / len(known)
    cost = {label: durations.get(label, mean) for label in labels}
    loads = [0.0] * count
    owner: dict[str, int] = {}
    for label in sorted(labels, key=lambda label: (-cost[label], label)):
        lightest = min(range(count), key=lambda index: (loads[index], index))
        owner[label] = lightest
        loads[lightest] += cost[label]
    return owner


def read_durations(path: Path) -> dict[str, float]:
    """The ``{label: seconds}`` recorded in ``path``; empty when there is no such file."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"durations file '{path}' is not readable JSON ({exc}); delete it, or rewrite it with --mmport-store-durations"
        ) from exc
    if not isinstance(data, dict) or not all(
        isinstance(v, int | float) for v in data.values()
    ):
        raise ValueError(
            f"durations file '{path}' is not a JSON object of port label to seconds; rewrite it with --mmport-store-durations"
        )
    return {str(label): float(seconds) for label, seconds in data.items()}


def write_durations(path: Path, measured: dict[str, float]) -> None:
    """Merge ``measured`` into the durations in ``path`` (ports not run this time keep theirs)."""
    merged = {
        **read_durations(path),
        **{label: round(seconds, 3) for label, seconds in measured.items()},
    }
    path.write_text(json.dumps(dict(sorted(merged.items())), indent=2) + "\n")
