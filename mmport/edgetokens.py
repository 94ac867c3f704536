"""The rule a port follows to tokenize across its items' edges as HF does.

HF tokenizes the prompt after expanding it; vLLM splices each item's ids into
the prompt's. At every item edge the two differ where the tokenizer's
pre-tokenizer or merges reach across the edge: Gemma 3's ``"\\n\\n"`` beside
``"\\n\\n"`` is one token of four newlines, a GPT-2 pre-tokenizer splits
``"\\n\\n"`` in two before a word. :func:`retokenize_edges` re-encodes a short
window of ordinary tokens around each edge and keeps the re-encoding where it
agrees with the splice at both ends of the window.

This module imports nothing of mmport's: the generated port carries its
functions verbatim (:func:`port_source`, placed by ``processing.py.jinja``),
and the analysis runs the same functions to decide whether the port explains
HF's ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["port_source", "retokenize_edges"]


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
    again by ``retokenize``, and the re-encoding replaces what it changes
    (see :func:`_changed_span`). A token merged across an edge belongs to
    both items; a token split keeps its first half at its old position::

        >>> pairs = {(3, 3): [9]}
        >>> merge = lambda w: pairs.get(tuple(w), w)
        >>> retokenize_edges([7, 3, 3, 8], [2], {7, 8}, merge)
        ([7, 9, 8], [0, 1, 1, 2])
    """
    edges = set(edges)
    ids: list[int] = []
    owners: list[list[int]] = []  # the old positions each new token stands for
    index, last_window = 0, -1
    while index < len(token_ids):
        left = 0
        while left < min(reach, len(ids)) and ids[-1 - left] not in special:
            left += 1
        if (
            index in edges
            and index != last_window
            and left
            and token_ids[index] not in special
        ):
            last_window = index
            end = index
            while (
                end < len(token_ids)
                and end - index < reach
                and token_ids[end] not in special
            ):
                end += 1
            window = ids[len(ids) - left :] + token_ids[index:end]
            joined = retokenize(window)
            opened = left < reach or len(ids) == left
            closed = end == len(token_ids) or token_ids[end] in special
            span = _changed_span(window, joined, left, opened, closed)
            if span is not None:
                head, tail = span
                base = len(ids) - left + head
                old = [p for q in range(base, len(ids)) for p in owners[q]]
                old += range(index, end - tail)
                new = joined[head : len(joined) - tail]
                del ids[base:], owners[base:]
                ids.extend(new)
                owners.extend([p] for p in old[: len(new)])
                owners.extend([] for _ in range(len(new) - len(old)))
                owners[-1].extend(old[len(new) :])
                index = end - tail
                continue
        ids.append(token_ids[index])
        owners.append([index])
        index += 1
    moved = [0] * len(token_ids)
    for position, old in enumerate(owners):
        for p in old:
            moved[p] = position
    return ids, moved


def _changed_span(
    window: list[int], joined: list[int], left: int, opened: bool, closed: bool
) -> tuple[int, int] | None:
    """How many leading and trailing tokens ``joined`` (the re-encoded ``window``) keeps, if it may replace it.

    It may where it keeps the window's first token (or nothing precedes the
    window but a boundary), keeps its last (or a boundary or the prompt's end
    follows), and changes tokens that touch the edge, which lies after the
    window's first ``left`` tokens. Otherwise the tokens outside the window
    might have re-encoded too, and the splice stays.
    """
    if joined == window:
        return None
    same = min(len(window), len(joined))
    head = next((i for i in range(same) if window[i] != joined[i]), same)
    tail = next(
        (i for i in range(same - head) if window[-1 - i] != joined[-1 - i]), same - head
    )
    if len(joined) == head + tail or not (head or opened) or not (tail or closed):
        return None
    if not head <= left <= len(window) - tail:
        return None
    return head, tail


def port_source() -> str:
    """The source of the functions a generated port carries to follow this rule."""
    import inspect

    return "\n\n".join(
        inspect.getsource(function) for function in (retokenize_edges, _changed_span)
    )
