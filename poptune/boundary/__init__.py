"""Boundary rules: which final prompt tokens of a segment run at full depth while the rest skip the block.

What the package holds: the contract (:mod:`poptune.boundary.rule`), the registry (:mod:`poptune.boundary.registry`,
the one list of rules) and one module per rule (``none``, ``last``, ``window``). A new rule is one module and one
registry line; nothing outside this package names a rule (``tests/boundary/test_registry_homes.py`` scans for it).
This ``__init__`` imports none of them.
"""

__all__: list[str] = []
