"""Derive a small byte-level BPE ``tokenizer.json`` from a real Qwen2 vocabulary.

The published Qwen2 vocabulary (``vocab.json``, 2.7 MB) and merges
(``merges.txt``, 1.6 MB) are too large to keep in the repository. This keeps
the 256 byte-level symbols and the first ``--merges`` merges in their real
rank order, each token at its real id, and every added token of the
checkpoint's ``tokenizer_config.json`` (``added_tokens_decoder``) at its real
id with its real flags. A word whose merges are all kept tokenizes exactly as
under the real files; a rarer one splits into more, real, pieces.

The pipeline around the model (NFC, Qwen2's split regex, byte-level
pre-tokenizer and decoder) is the one transformers' ``Qwen2Tokenizer``
builds for these files.

    python derive_bpe.py REAL_DIR SNAPSHOT_DIR --merges 10000
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def derive(real: Path, snapshot: Path, merges: int) -> None:
    """Write ``snapshot/tokenizer.json`` from ``real``'s vocabulary and ``snapshot``'s added tokens."""
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab = json.loads((real / "vocab.json").read_text(encoding="utf-8"))
    lines = (real / "merges.txt").read_text(encoding="utf-8").splitlines()
    rules = [tuple(line.split(" ")) for line in lines[1:] if line][:merges]
    kept = {token: i for token, i in vocab.items() if len(token) == 1 and i < 256}
    for left, right in rules:
        kept[left + right] = vocab[left + right]
    config = json.loads((snapshot / "tokenizer_config.json").read_text())
    added = sorted(config["added_tokens_decoder"].items(), key=lambda kv: int(kv[0]))
    # tokenizers numbers an added token after the model's vocabulary unless the
    # model holds it: with the middle of the vocabulary gone, the model holds
    # every added token at its real id so none is renumbered.
    kept.update({flags["content"]: int(i) for i, flags in added})
    backend = Qwen2Tokenizer(vocab=kept, merges=rules).backend_tokenizer
    data = json.loads(backend.to_str())
    data["added_tokens"] = [
        {"id": int(i), **AddedToken(**flags).__getstate__()} for i, flags in added
    ]
    (snapshot / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def main() -> None:
    """Command line: REAL_DIR SNAPSHOT_DIR [--merges N]."""
    parser = argparse.ArgumentParser()
    parser.add_argument("real", type=Path)
    parser.add_argument("snapshot", type=Path)
    parser.add_argument("--merges", type=int, default=10000)
    args = parser.parse_args()
    derive(args.real, args.snapshot, args.merges)


if __name__ == "__main__":
    main()
