"""Repo-wide checks: the import layers and the complexity limit."""
