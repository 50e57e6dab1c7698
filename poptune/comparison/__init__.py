"""POP against structured pruning, decided: every method on the same items, paired, with a request's time.

``poptune compare`` (:mod:`poptune.comparison.measure`) scores the full model, POP's configurations and every
baseline (:mod:`poptune.baselines`) on the same items of one workload, keeping each item's outcome, and times
each method against the full model for request profiles (time to first token, time per output token and a
request's end-to-end time, from interleaved pairs). It writes one raw record (JSON) per workload, meant to be
committed under ``leaderboards/raw/``.

``poptune leaderboard --records DIR`` (:mod:`poptune.comparison.board`) rebuilds the methods leaderboard from
those records alone, byte for byte: each baseline paired item for item with the POP configuration at least as
fast in prefill, ``POP - baseline`` with the score test's interval (:mod:`poptune.evaluate.paired`) at a
confidence shared by every row of the table (Bonferroni), and a verdict.
"""

from poptune.comparison.board import write_methods_board
from poptune.comparison.measure import PROFILES, Profile, compare

__all__ = ["PROFILES", "Profile", "compare", "write_methods_board"]
