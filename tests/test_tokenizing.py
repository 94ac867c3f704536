"""A port that tokenizes without special tokens is compared with HF asked the same way, where the chat template writes them."""

from __future__ import annotations

from mmport.sources import resolve
from mmport.verify.reference import HFReference
from mmport.verify.tokenizing import follow_port_tokenizing

TEXT = "describe this"


def _reference() -> HFReference:
    # LLaVA's tokenizer adds a BOS, as Llama's does.
    hf = HFReference(resolve("llava"))
    assert (
        hf.run(TEXT, []).input_ids
        != hf.processor.tokenizer(TEXT, add_special_tokens=False).input_ids
    )
    return hf


def test_a_port_adding_special_tokens_changes_nothing() -> None:
    hf = _reference()
    assert follow_port_tokenizing(hf, True) == ""
    assert follow_port_tokenizing(hf, None) == ""
    assert "add_special_tokens" not in hf.base_setting


def test_hf_is_asked_without_them_where_the_chat_template_writes_them() -> None:
    hf = _reference()
    hf.processor.chat_template = "{{ bos_token }}{% for m in messages %}USER: {{ m['content'][0]['text'] }}{% endfor %}"
    note = follow_port_tokenizing(hf, False)
    assert "the chat template writes them" in note, note
    bos = hf.processor.tokenizer.bos_token_id
    assert bos not in hf.run(TEXT, []).input_ids


def test_a_port_dropping_what_the_template_never_writes_is_held_to_hf_default() -> None:
    hf = _reference()
    hf.processor.chat_template = (
        "{% for m in messages %}USER: {{ m['content'][0]['text'] }}{% endfor %}"
    )
    note = follow_port_tokenizing(hf, False)
    assert "does not write them" in note, note
    assert hf.processor.tokenizer.bos_token_id in hf.run(TEXT, []).input_ids


def test_without_a_chat_template_the_port_is_followed_and_says_so() -> None:
    hf = _reference()
    hf.processor.chat_template = None
    hf.processor.tokenizer.chat_template = None
    note = follow_port_tokenizing(hf, False)
    assert "no chat template" in note, note
    assert hf.processor.tokenizer.bos_token_id not in hf.run(TEXT, []).input_ids
