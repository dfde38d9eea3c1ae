"""The documentation's relative links resolve (issue 42): every link and image in README.md and docs/*.md that points
into the repository names a file or folder that exists, and every `#anchor` names a heading of its page the way GitHub
makes heading ids (its slugs: lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats).

docs/incoming/ is skipped: it holds other branches' drafts until the lead folds them into the pages."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target) and ![alt](target)
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")  # [name]: target
_HTML = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_HTML_ID = re.compile(r"""<a\b[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def doc_files(root: Path = REPO_ROOT) -> list[Path]:
    """README.md and the pages directly under docs/ (not docs/incoming/)."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans blanked (a link in code is not a link)."""
    lines: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if match:
            fence = None if fence == match.group(1) else (fence or match.group(1))
            lines.append("")
            continue
        lines.append("" if fence else _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line))
    return lines


def github_slug(heading: str) -> str:
    """The id GitHub gives a heading: its rendered text lower-cased, characters other than letters, digits, spaces,
    hyphens and underscores dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or image reads as its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "").replace("*", "")
    text = "".join(ch for ch in text.lower() if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every `#fragment` a link may use for `path`: its headings' slugs (repeats numbered) and explicit HTML ids."""
    found: set[str] = set()
    seen: Counter[str] = Counter()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(_HTML_ID.findall(line))
        match = _HEADING.match(line)
        if match:
            slug = github_slug(match.group(2))
            found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return found


def link_targets(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link, image and reference definition in `path`'s prose."""
    targets: list[tuple[int, str]] = []
    for number, line in enumerate(prose_lines(path.read_text(encoding="utf-8")), start=1):
        for pattern in (_LINK, _REFERENCE, _HTML):
            targets.extend((number, target) for target in pattern.findall(line))
    return targets


def broken_links(files: list[Path], root: Path = REPO_ROOT) -> list[str]:
    """`file:line: target (why)` for each relative link whose file, or whose anchor in it, does not exist."""
    problems: list[str] = []
    anchor_cache: dict[Path, set[str]] = {}
    for path in files:
        for number, target in link_targets(path):
            if _SCHEME.match(target) or target.startswith("//"):
                continue  # http(s), mailto: not this test's business
            where = f"{path.relative_to(root).as_posix()}:{number}: {target}"
            file_part, _, fragment = target.partition("#")
            if file_part.startswith("/"):
                problems.append(f"{where} (absolute path: GitHub reads it from the site root; use a relative one)")
                continue
            resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
            if not resolved.is_relative_to(root.resolve()):
                problems.append(f"{where} (outside the repository)")
            elif not resolved.exists():
                problems.append(f"{where} (no such file)")
            elif fragment and resolved.suffix == ".md":
                if resolved not in anchor_cache:
                    anchor_cache[resolved] = anchors(resolved)
                if fragment not in anchor_cache[resolved]:
                    problems.append(f"{where} (no heading with that anchor)")
    return problems


def test_every_relative_link_and_anchor_in_the_docs_resolves():
    files = doc_files()
    assert (REPO_ROOT / "README.md") in files and len(files) >= 6, files  # README and the five pages at least
    assert not broken_links(files), "\n".join(broken_links(files))


def test_docs_incoming_is_not_checked(tmp_path: Path):
    (tmp_path / "docs" / "incoming").mkdir(parents=True)
    (tmp_path / "README.md").write_text("# x\n", encoding="utf-8")
    (tmp_path / "docs" / "incoming" / "branch.md").write_text("[gone](missing.md)\n", encoding="utf-8")
    assert doc_files(tmp_path) == [tmp_path / "README.md"]


def test_the_readme_stays_short_and_starts_with_the_two_commands():
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    first_block = text.split("```")[1]
    assert "bash dev.sh run" in first_block and "bash dev.sh test" in first_block


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Architecture: three layers, checked", "architecture-three-layers-checked"),
        ("Generation workloads (LLM prefill and decode)", "generation-workloads-llm-prefill-and-decode"),
        ("2. OS isolation, one sandbox per job", "2-os-isolation-one-sandbox-per-job"),
        ("`inspect` against its floor", "inspect-against-its-floor"),
        ("Queue & workers", "queue--workers"),
        ("snake_case **bold** [link](x.md)", "snake_case-bold-link"),
    ],
)
def test_slugs_are_githubs(heading: str, slug: str):
    assert github_slug(heading) == slug


def test_a_broken_file_link_a_broken_anchor_and_an_escape_are_each_reported(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Page\n\n## Real section\n\n## Real section\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Top\n\n"
        "[ok](docs/page.md) [ok](docs/page.md#real-section) [ok](docs/page.md#real-section-1) [ok](#top)\n"
        "![ok](docs/page.md) [web](https://example.com/x.md) `[code](not-checked.md)`\n"
        "```\n[fenced](not-checked.md)\n```\n"
        "[missing](docs/nope.md)\n"
        "[bad anchor](docs/page.md#no-such-section)\n"
        "[own anchor](#nowhere)\n"
        "![image](docs/screenshots/gone.png)\n"
        "[escape](../outside.md)\n"
        "[absolute](/docs/page.md)\n"
        "[ref]: docs/also-missing.md\n",
        encoding="utf-8",
    )
    problems = broken_links([readme], root=tmp_path)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "docs/nope.md (no such file)",
        "docs/page.md#no-such-section (no heading with that anchor)",
        "#nowhere (no heading with that anchor)",
        "docs/screenshots/gone.png (no such file)",
        "../outside.md (outside the repository)",
        "/docs/page.md (absolute path: GitHub reads it from the site root; use a relative one)",
        "docs/also-missing.md (no such file)",
    ]
