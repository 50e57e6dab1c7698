"""K/V sources: where the pruned tokens' K/V in POP's skipped block come from (the contract and its sources).

- ``source``: the contract (:class:`~poptune.kv.source.KVSource`): a source's name and label, which
  configurations it runs, how a skipped layer writes the pruned tokens' K/V, how the model attends over what it
  wrote (the hooks the engine calls), how a model is prepared for it, what an exported configuration carries;
- ``registry``: the sources by name, the one list (a new source: one module here and one line there);
- ``own`` (the paper's, the default), ``calibrated`` (fitted maps), ``anchor`` (the first token and the boundary
  only): the sources;
- ``project``: the independent K/V projection every source writes with; ``block_kv``: the skipped block's own
  K/V in one product (the ``own`` source's, every layer's norm folded into one GEMM); ``maps``: calibrated maps
  and the folder they are kept in; ``compact``: a layer cache that keeps some of its tokens, and the masks over it.

This package is the bottom of the engine's floor (the engine and the block import it, it imports neither);
what needs the engine -- fitting and checking maps, the one preparation path -- is :mod:`poptune.kvfit`.
"""

#: The package's modules (its API: import the one you need; importing the package imports none of them).
__all__ = ["anchor", "block_kv", "calibrated", "compact", "maps", "own", "project", "registry", "source"]
