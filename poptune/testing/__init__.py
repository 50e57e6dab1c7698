"""Helpers for poptune's own tests and benchmarks (a throwaway PostgreSQL server); not part of the API."""

#: The package's modules (its API: import the one you need; importing the package imports none of them).
__all__ = ["pgserver"]
