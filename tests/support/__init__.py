"""Helpers the tests share (models, synthetic results, test-only backends and sandbox targets, fake servers and
stages, database and HTTP helpers). Imported as `tests.support.<module>`, also by name from sandboxed children
(e.g. "tests.support.backends_for_tests:WrongNumbersBackend"). Nothing here imports torch at package level."""
