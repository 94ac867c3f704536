"""A model class's checkpoint names in the layouts transformers loads.

Three layouts, all derived from transformers' own key-renaming table for
the model class (``transformers.conversion_mapping.get_model_conversion_mapping``,
the renamings transformers applies when it loads a hub checkpoint):

- the state-dict names of the model transformers builds;
- ``saved``: what this transformers' ``save_pretrained`` writes for a model
  built from a config: each renaming undone but the prefix changes
  (``revert_weight_conversion`` drops those, not knowing whether the prefix
  was there), so LLaVA's CLIP tower is saved as ``vision_tower.embeddings...``;
- ``hub``: the names real hub repos of the family carry, i.e. each of the
  table's renamings undone, last first. For LLaVA,
  ``model.vision_tower.embeddings.patch_embedding.weight`` (a 5.x name)
  becomes ``vision_tower.vision_model.embeddings.patch_embedding.weight``
  and ``model.language_model.layers.0...`` becomes
  ``language_model.model.layers.0...``. The legacy renamings (old spellings
  transformers still accepts) are left out: no hub repo is written in them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Layouts", "hub_names", "layouts", "renamings", "saved_names"]


def renamings(model: Any, *, legacy: bool) -> list:
    """transformers' key renamings for ``model`` (with the legacy spellings where ``legacy``)."""
    from transformers.conversion_mapping import (
        WeightRenaming,
        get_model_conversion_mapping,
    )

    return [
        w
        for w in get_model_conversion_mapping(model, add_legacy=legacy)
        if isinstance(w, WeightRenaming)
    ]


def _undone(model: Any, names: list[str], *, prefix_changes: bool) -> dict[str, str]:
    """Each of ``names`` with the table's renamings undone, last first."""
    from transformers.core_model_loading import PrefixChange, rename_source_key

    forward = renamings(model, legacy=False)
    if not prefix_changes:
        forward = [w for w in forward if not isinstance(w, PrefixChange)]
    undo = [w.reverse_transform() for w in reversed(forward)]
    return {name: rename_source_key(name, undo, [])[0] for name in names}


def hub_names(model: Any, names: list[str]) -> dict[str, str]:
    """Each of the model's state-dict ``names`` in the hub layout (see the module docstring)."""
    return _undone(model, names, prefix_changes=True)


def saved_names(model: Any, names: list[str]) -> dict[str, str]:
    """Each of the model's state-dict ``names`` as ``save_pretrained`` writes it (see the module docstring)."""
    return _undone(model, names, prefix_changes=False)


# A parameter's name in each layout: (state-dict name, saved name, hub name).
Layouts = tuple[str, str, str]


def layouts(model_cls: type[Any], config: Any) -> list[Layouts]:
    """Every parameter's name in each layout, for ``model_cls`` built from ``config``
    on the meta device (no weights are allocated)."""
    import torch

    with torch.device("meta"):
        model = model_cls._from_config(config)
    names = list(model.state_dict())
    saved, hub = saved_names(model, names), hub_names(model, names)
    return [(name, saved[name], hub[name]) for name in names]
