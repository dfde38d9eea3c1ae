"""Small rule functions (issue 29): no function in product code (advisor/, app/, workers/) above cyclomatic
complexity 20 as radon counts it - the same number `radon cc -s -n D advisor app workers` prints - so a rule
stays one thing a reader can hold in their head.

ALLOWED lists functions let stay above the limit (none now: the decision engine's and the source front end's were
split into named functions); the test also fails when one of them has dropped to the limit (or gone), so the list
can only shrink."""

from __future__ import annotations

from pathlib import Path

from radon import complexity as radon_complexity  # the `test` extra

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("advisor", "app", "workers")
LIMIT = 20  # radon's rank C ends at 20; D and worse fail

# (file, qualified name) of functions let stay above LIMIT. Remove an entry when its function is split.
ALLOWED: frozenset[tuple[str, str]] = frozenset()  # none left: every function is at most LIMIT


def complex_functions(root: Path = REPO_ROOT, limit: int = LIMIT) -> dict[tuple[str, str], int]:
    """(file, qualified name) -> complexity of every function and method above `limit` under PACKAGES."""
    found: dict[tuple[str, str], int] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for block in radon_complexity.cc_visit(path.read_text(encoding="utf-8")):
                if block.complexity > limit:
                    found[(path.relative_to(root).as_posix(), block.fullname)] = block.complexity
    return found


def test_no_function_is_above_the_complexity_limit_except_the_allow_listed():
    found = complex_functions()
    too_complex = sorted(f"{file}:{name} ({cc})" for (file, name), cc in found.items() if (file, name) not in ALLOWED)
    assert not too_complex, f"above cyclomatic complexity {LIMIT} (split into named functions): {too_complex}"


def test_the_allow_list_names_only_functions_still_above_the_limit():
    stale = sorted(f"{file}:{name}" for file, name in ALLOWED - set(complex_functions()))
    where = "tests/repo/test_complexity.py"
    assert not stale, f"no longer above {LIMIT} (or gone): remove from ALLOWED in {where}: {stale}"


def test_a_function_above_the_limit_is_named(tmp_path):
    """The check itself: a function of complexity 21 in a product package is found, one of exactly 20 is not."""

    def branches(name: str, count: int) -> str:
        body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(count))
        return f"def {name}(x):\n{body}    return -1\n\n"

    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "app" / "rules.py").write_text(branches("too_many", 20) + branches("at_the_limit", 19))
    assert complex_functions(tmp_path) == {("app/rules.py", "too_many"): 21}
