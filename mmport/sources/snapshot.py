"""The resolved form of a model reference: a directory plus what it holds."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmport.errors import FOREIGN_ERRORS, BadReferenceError, one_line
from mmport.sources.processor_code import ProcessorCode

if TYPE_CHECKING:  # transformers loads lazily, inside the methods that need it
    from transformers import ProcessorMixin

__all__ = ["Snapshot", "configured_token_id", "named_token_ids", "read_config_json"]


def configured_token_id(config: Any, modality: str) -> tuple[str, int] | None:
    """``(attribute, id)`` of the token ``config`` embeds ``modality`` at (``video_token_id``, ``audio_token_index``)."""
    for name in (f"{modality}_token_id", f"{modality}_token_index"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return name, value
    return None


def named_token_ids(config: Any) -> set[int]:
    """Every token id ``config`` names itself (its ``*_token_id`` and ``*_token_index`` values)."""
    return {
        v
        for k, v in vars(config).items()
        if k.endswith(("_token_id", "_token_index")) and isinstance(v, int)
    }


def read_config_json(directory: Path) -> dict[str, Any]:
    """``directory/config.json`` as a dict, or a :class:`BadReferenceError` saying what is wrong with it."""
    path = directory / "config.json"
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BadReferenceError(
            f"'{path}' is not valid JSON ({exc.msg}, line {exc.lineno}); restore it from the checkpoint"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadReferenceError(f"'{path}' cannot be read ({one_line(exc)})") from None
    if not isinstance(data, dict):
        raise BadReferenceError(
            f"'{path}' holds a {type(data).__name__}, not a JSON object; is it a transformers config?"
        )
    return data


@dataclass(frozen=True)
class Snapshot:
    """A model snapshot on local disk: config, processor and tokenizer files.

    ``origin`` says how the reference was resolved: ``"local"`` (a directory the
    user named), ``"hub"`` (downloaded or cached with huggingface_hub) or
    ``"synthetic"`` (built offline from the installed transformers' defaults).
    Heavy objects (config, processor) are loaded lazily and cached.
    """

    ref: str
    path: Path
    origin: str
    model_type: str
    trust_remote_code: bool = False
    # ``--processor-code``: the processor class kept outside the snapshot, used in place of AutoProcessor's.
    processor_code: ProcessorCode | None = None
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def config_dict(self) -> dict[str, Any]:
        """The raw ``config.json`` as a dict (no transformers import)."""
        return read_config_json(self.path)

    def load_config(self) -> Any:
        """The model's ``PretrainedConfig``, loaded with ``AutoConfig``.

        A config transformers cannot load is the snapshot's fault: a
        :class:`BadReferenceError` saying so. One whose class lives outside
        transformers and the snapshot, beside a processor from
        ``--processor-code`` (DeepSeek-VL2's ``deepseek_vl_v2``, defined in its
        package's model code), is read as a plain ``PretrainedConfig``: the
        processor reads none of it, mmport only its values.
        """
        if "config" not in self._cache:
            from transformers import AutoConfig

            if self._config_outside():
                from transformers import PretrainedConfig

                self._cache["config"] = PretrainedConfig.from_dict(self.config_dict)
                return self._cache["config"]
            try:
                self._cache["config"] = AutoConfig.from_pretrained(
                    self.path, trust_remote_code=self.trust_remote_code
                )
            except FOREIGN_ERRORS as exc:
                self._raise_for_remote_code(exc, "its config class")
                raise BadReferenceError(
                    f"{self.path}: transformers cannot load config.json ({one_line(exc)})"
                ) from exc
        return self._cache["config"]

    def _config_outside(self) -> bool:
        """Whether config.json names a model type neither transformers nor the snapshot defines, beside --processor-code."""
        from transformers import CONFIG_MAPPING

        model_type = self.config_dict.get("model_type")
        return (
            self.processor_code is not None
            and "auto_map" not in self.config_dict
            and model_type is not None
            and model_type not in CONFIG_MAPPING
        )

    def load_processor(self) -> Any:
        """The HF processor (``AutoProcessor``, or ``--processor-code``'s class) of this snapshot, built once.

        A processor that does not load, or is not a multimodal processor, is a
        :class:`BadReferenceError` naming the files to look at.
        """
        if "processor" not in self._cache:
            from transformers import AutoProcessor

            from mmport.hf.lazyimports import accept_lazy_imports
            from mmport.sources.processorless import names_no_processor

            if not self.processor_code and names_no_processor(self.path):
                # AutoProcessor would find the tokenizer alone: the model's own chat() is the reference.
                self._cache["processor"] = self._chat_reference()
                return self._cache["processor"]

            if self.trust_remote_code:
                accept_lazy_imports()

            # Model code may print as it imports or builds (DeepSeek-VL2's processor
            # prints each token it adds): stdout is mmport's report (inspect --json).
            with contextlib.redirect_stdout(io.StringIO()):
                factory = (
                    self._outside_processor_class()
                    if self.processor_code
                    else AutoProcessor
                )
                processor = self._from_pretrained(factory)
            self._check_multimodal(processor)
            self._cache["processor"] = processor
        return self._cache["processor"]

    def _from_pretrained(self, factory: Any) -> Any:
        """``factory.from_pretrained`` on this snapshot; a failure is one line naming the files to look at."""
        from mmport.hf.quiet import quiet_transformers

        try:
            with quiet_transformers():
                return factory.from_pretrained(
                    self.path, trust_remote_code=self.trust_remote_code
                )
        except FOREIGN_ERRORS as exc:
            self._raise_for_remote_code(exc, "its processor")
            raise BadReferenceError(
                f"{self.path}: the HF processor does not load ({one_line(exc)}); "
                "check processor_config.json, the image/video/audio processor config and the tokenizer files"
            ) from exc

    def _check_multimodal(self, processor: Any) -> None:
        """Refuse a processor mmport cannot probe: not a ``ProcessorMixin``, or one with no media sub-processor.

        mmport reads an item's geometry, and builds its probes, from the
        sub-processor of its modality (``image_processor``, ...), or through
        the processor's own ``__call__`` where it handles images itself and
        that call takes them (DeepSeek-VL2, see :mod:`mmport.hf.modalities`).
        """
        from transformers import ProcessorMixin

        from mmport.hf.modalities import handles_images_itself

        name = type(processor).__name__
        if not isinstance(processor, ProcessorMixin):
            raise BadReferenceError(
                f"{self.path}: AutoProcessor gives a {name}, not a multimodal processor; "
                "a snapshot needs a processor config naming its processor class"
            )
        attributes = list(processor.get_attributes())
        if not [a for a in attributes if "tokenizer" not in a] and not (
            handles_images_itself(processor)
        ):
            where = self.processor_code
            defined = f" ({where.module_file}:{where.line})" if where else ""
            raise BadReferenceError(
                f"{self.path}: its processor {name}{defined} has no image, video or audio sub-processor "
                f"(attributes {attributes}); mmport probes and counts an item through its modality's "
                "sub-processor, or through a __call__ of the processor's own taking `images`, "
                "and it has neither"
            )

    def _chat_reference(self) -> Any:
        """The model's own prompt path as a processor (no processor class), once the user consents to run it."""
        from mmport.hf.chatref import load_chat_reference
        from mmport.sources.processorless import processorless_error

        if not self.trust_remote_code:
            raise processorless_error(self.path)
        try:
            return load_chat_reference(self.path)
        except FOREIGN_ERRORS as exc:
            self._raise_for_remote_code(exc, "its model's chat()")
            raise BadReferenceError(
                f"{self.path}: its model's chat() cannot serve as the reference ({one_line(exc)})"
            ) from exc

    def _outside_processor_class(self) -> type[ProcessorMixin]:
        """``--processor-code``'s processor class, imported once the user consents to run it."""
        from mmport.sources.processor_code import import_processor_class

        assert self.processor_code is not None, "called for --processor-code only"
        if not self.trust_remote_code:
            raise self.processor_code.consent_error(self.path)
        return import_processor_class(self.processor_code)

    def _raise_for_remote_code(self, exc: Exception, what: str) -> None:
        """A load that failed for the snapshot's own code: one line saying so (no consent, or an import it lacks)."""
        from mmport.sources.remote import (
            consent_error,
            import_problem,
            refused_without_consent,
            shipped_modules,
        )

        if (
            not self.trust_remote_code
            and shipped_modules(self.path)
            and refused_without_consent(exc)
        ):
            raise consent_error(self.path, what) from None
        problem = import_problem(exc, self.path) if self.trust_remote_code else None
        if problem:
            raise BadReferenceError(f"{self.path}: {problem}") from None

    def model_token_id(self, modality: str) -> int | None:
        """The token the model fills with ``modality`` features (``config.<modality>_token_id``), if the config names one.

        HF models place features where ``input_ids == config.image_token_id``
        (``get_placeholder_mask``), likewise ``video_token_id`` and
        ``audio_token_id`` (or ``..._token_index``, read through the config's
        attribute map); a processor's placeholder may be another token.
        """
        configured = configured_token_id(self.load_config(), modality)
        return configured[1] if configured else None

    def model_image_token_id(self) -> int | None:
        """:meth:`model_token_id` for images."""
        return self.model_token_id("image")
