"""The HF reference of a checkpoint with no processor class: its model's own ``chat()`` prompt path.

InternVL2's chat checkpoints ship a model and a tokenizer, no processor. The
model card tiles each image (``dynamic_preprocess``: the config's
``min/max_dynamic_patch``, ``use_thumbnail``, ``force_image_size``), and the
model's ``chat(tokenizer, pixel_values, question, generation_config,
num_patches_list=...)`` writes each ``<image>`` of the prompt out and
tokenizes it before calling ``generate``. :class:`ChatPromptProcessor` is
that path as a processor verify can call:

- the tiles come from transformers' ``GotOcr2ImageProcessor`` with
  ``crop_to_patches`` and the config's settings, which tiles exactly as the
  model card does (tests/test_chat_checkpoints.py runs the card's code over
  hundreds of sizes);
- the ids are the ones the checkpoint's own ``chat()`` hands ``generate``,
  run on a tiny twin of the model (its code unchanged; only its weights are
  small, and ``generate`` is replaced on that one instance by a function
  that keeps the ids and stops). A vLLM request carries the prompt already
  templated, so the reference registers, in the checkpoint's own
  conversation registry, a template that writes the message alone.

Nothing here reads what the analyzers read: the count, the placeholder and
its expansion are whatever the model's code does when it runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

from transformers import ProcessorMixin

from mmport.errors import BadReferenceError

__all__ = ["ChatPromptProcessor", "load_chat_reference"]

# The template the reference registers: the message alone (see the module docstring).
RAW_TEMPLATE = "mmport-raw-prompt"


class _Captured(Exception):
    """Raised by the twin's ``generate``: carries the ids ``chat()`` built."""

    def __init__(self, input_ids: Any) -> None:
        super().__init__("chat() built its prompt")
        self.input_ids = input_ids


class ChatPromptProcessor(ProcessorMixin):
    """An image processor, a tokenizer and the model's ``chat()``: HF's answer for a prompt with images."""

    attributes: ClassVar[list[str]] = ["image_processor", "tokenizer"]
    image_processor_class = "GotOcr2ImageProcessor"
    tokenizer_class = "AutoTokenizer"

    def __init__(self, image_processor: Any, tokenizer: Any, model: Any) -> None:
        super().__init__(image_processor, tokenizer)
        self.model = model
        # The text InternVL-style chat() replaces per image (and writes itself into a question
        # without one): the placeholder verify writes in its prompts.
        self.image_token = "<image>"
        # chat() tells the model which token its image features fill (img_context_token_id).
        self._chat_ids("", None, [])
        self.image_token_id = getattr(model, "img_context_token_id", None)
        if not isinstance(self.image_token_id, int):
            raise BadReferenceError(
                f"{type(model).__name__}.chat() names no img_context_token_id; mmport cannot tell its image token"
            )

    def __call__(
        self,
        text: Any = None,
        images: Any = None,
        return_tensors: str = "pt",
        **kwargs: Any,
    ) -> Any:
        """``input_ids`` as ``chat()`` builds them for ``text``, with the tiles of ``images``."""
        from transformers import BatchFeature

        images = _flat(images)
        prompt = text[0] if isinstance(text, list) else (text or "")
        data: dict[str, Any] = {}
        num_patches: list[int] = []
        if images:
            tiles = self.image_processor(images, return_tensors="pt", **kwargs)
            data["pixel_values"] = tiles["pixel_values"]
            data["num_patches"] = tiles["num_patches"]
            num_patches = tiles["num_patches"].tolist()
        ids = self._chat_ids(prompt, data.get("pixel_values"), num_patches)
        data["input_ids"] = ids
        data["attention_mask"] = ids.new_ones(ids.shape)
        return BatchFeature(data, tensor_type=return_tensors)

    def _chat_ids(self, prompt: str, pixel_values: Any, num_patches: list[int]) -> Any:
        """The ids the model's ``chat()`` hands ``generate`` for ``prompt`` and these tiles."""
        try:
            # history=[]: the request's prompt is whole, so chat() adds no <image> line of its own.
            self.model.chat(
                self.tokenizer,
                pixel_values,
                prompt,
                {"max_new_tokens": 1},
                history=[],
                num_patches_list=num_patches or None,
            )
        except _Captured as captured:
            return captured.input_ids
        raise BadReferenceError(
            f"{type(self.model).__name__}.chat() never called generate(); mmport cannot read its prompt"
        )


def _flat(images: Any) -> list:
    """Images as one flat list (verify nests a prompt's images in one sample)."""
    if images is None:
        return []
    if not isinstance(images, list | tuple):
        return [images]
    return [i for image in images for i in _flat(image)]


def load_chat_reference(path: Path) -> ChatPromptProcessor:
    """The reference for the snapshot at ``path`` (its code runs: the caller has the user's consent)."""
    from transformers import AutoConfig, AutoTokenizer, GotOcr2ImageProcessor
    from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    config = AutoConfig.from_pretrained(path, trust_remote_code=True)
    if getattr(config, "use_thumbnail", None) is not True:
        # GotOcr2 adds a thumbnail to every image of more than one tile, as the card does with it on.
        raise BadReferenceError(
            f"{path}: config.json sets use_thumbnail {getattr(config, 'use_thumbnail', None)}; "
            "mmport's reference tiles with GotOcr2ImageProcessor, which always adds the thumbnail"
        )
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    size = config.force_image_size or config.vision_config.image_size
    # The model card's settings: build_transform normalises with ImageNet's mean and std.
    image_processor = GotOcr2ImageProcessor(
        crop_to_patches=bool(getattr(config, "dynamic_image_size", True)),
        min_patches=config.min_dynamic_patch,
        max_patches=config.max_dynamic_patch,
        size={"height": size, "width": size},
        image_mean=list(IMAGENET_DEFAULT_MEAN),
        image_std=list(IMAGENET_DEFAULT_STD),
    )
    return ChatPromptProcessor(image_processor, tokenizer, _prompt_model(path, config))


def _prompt_model(path: Path, config: Any) -> Any:
    """A tiny twin of the checkpoint's model, its template the message alone and its ``generate`` a stop."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from mmport.hf.tiny import tiny_twin

    model_class: Any = get_class_from_dynamic_module(config.auto_map["AutoModel"], path)
    # chat() builds its prompt from a conversation template (FastChat's registry, conversation.py).
    get_template = getattr(model_class, "chat", None)
    get_template = get_template and get_template.__globals__.get("get_conv_template")
    if get_template is None:
        raise BadReferenceError(
            f"{path}: {model_class.__name__}.chat() builds no prompt from get_conv_template; "
            "mmport knows no other way to run a model's own prompt code"
        )
    model = model_class(tiny_twin(config)).eval()
    conversation = sys.modules[get_template.__module__]
    conversation.register_conv_template(
        conversation.Conversation(
            name=RAW_TEMPLATE,
            system_template="",
            roles=("", ""),
            sep_style=conversation.SeparatorStyle.NO_COLON_SINGLE,
            sep="",
        ),
        override=True,
    )
    model.template, model.system_message = RAW_TEMPLATE, ""

    def generate(**inputs: Any) -> Any:
        raise _Captured(inputs["input_ids"])

    model.generate = generate
    return model
