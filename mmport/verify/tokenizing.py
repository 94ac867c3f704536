"""Which text the port's tokenizing adds, and asking HF for the same.

vLLM tokenizes a request's text with the port's ``get_default_tok_params``.
Ports of families whose chat template writes the BOS itself say
``add_special_tokens=False`` (vLLM's PaliGemma, LFM2-VL, Muse Glimmer), so the
rendered prompt does not get a second one. HF's processor, called as a user
would, adds it; the port is then compared with HF asked the same way, where
the checkpoint's chat template writes what the port leaves out. Where the
template does not, the port drops a token the model needs: HF's default
stands, and the tokens check fails it.
"""

from __future__ import annotations

from mmport.errors import FOREIGN_ERRORS
from mmport.hf.layout import template_writes
from mmport.verify.reference import HFReference

__all__ = ["follow_port_tokenizing"]

_TEXT = "describe this"


def follow_port_tokenizing(hf: HFReference, adds_special_tokens: bool | None) -> str:
    """Ask HF without special tokens where the port declares so and the chat template writes them; the note to report."""
    if adds_special_tokens is not False:
        return ""
    try:
        with_specials = hf.run(_TEXT, []).input_ids
        hf.base_setting["add_special_tokens"] = False
        without = hf.run(_TEXT, []).input_ids
    except FOREIGN_ERRORS:
        # HF takes no such switch, or no text alone: nothing to follow
        hf.base_setting.pop("add_special_tokens", None)
        return ""
    extra = [token for token in with_specials if token not in without]
    if not extra:
        hf.base_setting.pop("add_special_tokens", None)
        return ""
    tokenizer = getattr(hf.processor, "tokenizer", hf.processor)
    texts = [str(text) for text in tokenizer.convert_ids_to_tokens(extra)]
    written = template_writes(hf.processor, texts)
    declared = f"the port tokenizes without special tokens ({', '.join(texts)})"
    if written is False:
        hf.base_setting.pop("add_special_tokens", None)
        return f"{declared}, but the chat template does not write them: compared with HF's default, which adds them"
    source = (
        "the chat template writes them"
        if written
        else "the snapshot has no chat template to confirm that one writes them"
    )
    return f"{declared}, and {source}: HF was asked with add_special_tokens=False too"
