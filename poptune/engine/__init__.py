"""The Prefill-Only Pruning (POP) engine on Hugging Face decoder models (floor 2; ``docs/architecture.md``).

The engine itself is :mod:`poptune.engine.pop` (:func:`apply_pop`, the prefill that skips the block) with
:mod:`poptune.engine.config` (``PopConfig`` and its outside forms: label, record, text fields); this package
re-exports their names and holds nothing else. Its other modules: ``block`` (the skipped
block's forward and masks), ``segments`` (prompts fed in segments: chunked prefill, turns), ``prefix``
(prefix-state reuse), ``trunk`` (shared-trunk scoring), ``greedy`` (``generate``'s greedy loop replayed), ``joint``
(several configurations' generations stacked) and ``speculate`` (greedy POP generation verified in rounds).
"""

from poptune.boundary.registry import BOUNDARIES
from poptune.engine.config import PopConfig
from poptune.engine.pop import (
    STAGES,
    PopHandle,
    apply_pop,
    decoder_of,
    get_pop_config,
    remove_pop,
    stage,
)

__all__ = ["BOUNDARIES", "STAGES", "PopConfig", "PopHandle", "apply_pop", "remove_pop", "get_pop_config", "decoder_of",
           "stage"]
