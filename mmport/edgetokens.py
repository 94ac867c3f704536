"""The rule a port follows to tokenize across its items' edges as HF does.

HF tokenizes the prompt after expanding it; vLLM splices each item's ids into
the prompt's. At every item edge the two differ where the tokenizer's
pre-tokenizer or merges reach across the edge: Gemma 3's ``"\\n\\n"`` beside
``"\\n\\n"`` is one token of four newlines, a GPT-2 pre-tokenizer splits
``"\\n\\n"`` in two before a word. :func:`retokenize_edges` re-encodes a short
window of ordinary tokens around each edge and keeps the re-encoding where it
agrees with the splice at both ends of the window.

This module imports nothing: the generated port carries
:func:`retokenize_edges` verbatim (see ``processing.py.jinja``), and the
analysis runs the same function to decide whether the port explains HF's ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["retokenize_edges"]


def retokenize_edges(
    token_ids: list[int],
    edges: Iterable[int],
    special: set[int],
    retokenize: Callable[[list[int]], list[int]],
    reach: int = 4,
) -> tuple[list[int], list[int]]:
    """Re-encode the ordinary tokens around each edge; return the new ids and each old position's new one.

    ``edges`` are the positions of the first token of an item's text and of
    the first token after it. Around each, up to ``reach`` ordinary tokens
    on either side (never a token in ``special``) are decoded and encoded
    again by ``retokenize``. The re-encoding replaces the window where it
    keeps the window's first and last tokens (or the window ends at a
    special token or the prompt's end, so nothing outside it can be
    affected) and the tokens it changes touch the edge. A token merged
    across an edge belongs to both items; a token split keeps its first
    half at its old position::

        >>> pairs = {(3, 3): [9]}
        >>> retokenize_edges([7, 3, 3, 8], [2], {7, 8}, lambda w: pairs.get(tuple(w), w))
        ([7, 9, 8], [0, 1, 1, 2])
    """
    edges = set(edges)
    ids: list[int] = []
    owners: list[list[int]] = []  # the old positions each new token stands for
    index, last_window = 0, -1
    while index < len(token_ids):
        token = token_ids[index]
        left = 0
        while left < min(reach, len(ids)) and ids[-1 - left] not in special:
            left += 1
        if index in edges and index != last_window and left and token not in special:
            last_window = index
            end = index
            while end < len(token_ids) and end - index < reach and token_ids[end] not in special:
                end += 1
            window = ids[len(ids) - left :] + token_ids[index:end]
            joined = retokenize(window)
            opened = left < reach or len(ids) == left
            closed = end == len(token_ids) or token_ids[end] in special
            same = min(len(window), len(joined))
            head = next((i for i in range(same) if window[i] != joined[i]), same)
            tail = next((i for i in range(same - head) if window[-1 - i] != joined[-1 - i]), same - head)
            tail = min(tail, end - index)
            if (
                joined != window
                and len(joined) > head + tail
                and (head or opened)
                and (tail or closed)
                and head <= left <= len(window) - tail
            ):
                base = len(ids) - left + head
                old = [p for q in range(base, len(ids)) for p in owners[q]] + list(range(index, end - tail))
                new = joined[head : len(joined) - tail]
                del ids[base:], owners[base:]
                ids.extend(new)
                owners.extend([old[i]] for i in range(min(len(new), len(old))))
                owners.extend([] for _ in range(len(new) - len(old)))
                owners[-1].extend(old[len(new) :])
                index = end - tail
                continue
        ids.append(token)
        owners.append([index])
        index += 1
    moved = [0] * len(token_ids)
    for position, old in enumerate(owners):
        for p in old:
            moved[p] = position
    return ids, moved
