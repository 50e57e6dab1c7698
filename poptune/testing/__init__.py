"""Helpers for poptune's own tests and benchmarks (a throwaway PostgreSQL server); not part of the API."""
