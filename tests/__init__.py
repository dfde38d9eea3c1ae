"""The test suite, grouped like the code (tests/core, harness, service, web, workers, cli; tests/repo for repo-wide
checks). A package, so every test module is `tests.<group>.<module>` and a folder such as tests/workers never
shadows the product package of the same name; shared helpers are `tests.support.*`."""
