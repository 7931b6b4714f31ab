"""Tests on real clusters (run on their own: pytest tests/cluster)."""
