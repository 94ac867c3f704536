"""What every stage needs from Hugging Face: calling it, reading it, quieting it.

The lowest layer above :mod:`mmport.media` and :mod:`mmport.errors`: the
processor call as mmport makes it (:mod:`mmport.hf.processor`), the
modalities a processor handles (:mod:`mmport.hf.modalities`), its typed
call kwargs (:mod:`mmport.hf.kwargs`), the placeholder text it demands
(:mod:`mmport.hf.wrappers`), the parameter its ``__call__`` takes items by
(:mod:`mmport.hf.calls`), processors that write their own prompt
(:mod:`mmport.hf.ownprompt`), which code is HF's (:mod:`mmport.hf.code`),
typed reads of that code as libcst parses it (:mod:`mmport.hf.syntax`),
tiny twins of configs (:mod:`mmport.hf.tiny`) and quieting transformers
(:mod:`mmport.hf.quiet`).

Sources, analyzers, the runtime and verify all import from here; nothing
here imports them (docs/architecture.md). Only plumbing lives here: it says
how to call HF and what HF answered, never which rule a port follows, so
verify's reference and the analyzers share no analysis.
"""

__all__: list[str] = []
