"""The repository's pages cannot point at nothing: every relative link and image in
README.md, ARCHITECTURE.md, SPEC.md, bench/README.md and docs/*.md names a file that
exists, and every `#anchor` a heading or an `<a id>` of the page it names, with the
anchors GitHub makes from headings. README stays a page a newcomer reads through, and
links nowhere outside the repository."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

REPOSITORY = Path(__file__).resolve().parents[2]
README = REPOSITORY / "README.md"
README_MOST_LINES = 260

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); the target up to a space or `)`
LINK = re.compile(r"\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_TARGET = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HTML_ID = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def pages() -> list[Path]:
    named = [README, REPOSITORY / "ARCHITECTURE.md", REPOSITORY / "SPEC.md"]
    named.append(REPOSITORY / "bench" / "README.md")
    return named + sorted((REPOSITORY / "docs").glob("*.md"))


def prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks, inline code spans blanked: what
    GitHub renders as Markdown, where a link or a heading can be."""
    lines, fence = [], ""
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence:
            if match and match[1][0] == fence[0] and len(match[1]) >= len(fence):
                fence = ""
            lines.append("")
            continue
        if match:
            fence = match[1]
            lines.append("")
            continue
        lines.append(INLINE_CODE.sub(lambda code: " " * len(code[0]), line))
    return lines


def targets(text: str) -> list[str]:
    found = []
    for line in prose_lines(text):
        found += LINK.findall(line) + HTML_TARGET.findall(line)
        reference = REFERENCE.match(line)
        if reference:
            found.append(reference[1])
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lowercased, every character
    but letters, digits, `_`, `-` and spaces dropped, spaces made `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or image: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"(\*{1,3}|\b_{1,3}|_{1,3}\b)", "", text)  # emphasis marks
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every `#anchor` a page has: its headings' slugs (a repeated one gets `-1`, `-2`,
    as on GitHub) and the ids of its HTML elements."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose_lines(text):
        heading = HEADING.match(line)
        if heading:
            base = slug(heading[2])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ID.findall(line))
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in targets(page.read_text()):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # outside the repository: not checked here
        path, _, anchor = target.partition("#")
        file = (page.parent / unquote(path)).resolve() if path else page
        where = f"{page.relative_to(REPOSITORY)}: {target}"
        if not file.is_relative_to(REPOSITORY) or not file.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and file.suffix == ".md" and unquote(anchor) not in anchors(file.read_text()):
            broken.append(f"{where} (no such heading or id)")
    return broken


def test_the_slugs_are_githubs() -> None:
    assert slug("13. Membership changes") == "13-membership-changes"
    assert slug("`bench.throughput`: maximum throughput (closed model, wrk)") == (
        "benchthroughput-maximum-throughput-closed-model-wrk"
    )
    assert slug("The nemesis found a defect of dht's") == "the-nemesis-found-a-defect-of-dhts"
    assert slug("Durability: group, none and each (2026-11-26)") == (
        "durability-group-none-and-each-2026-11-26"
    )
    assert slug("A power cut, by hand: the lazy filesystem") == (
        "a-power-cut-by-hand-the-lazy-filesystem"
    )
    assert slug("##### replication: 6 rule(s) failed".lstrip("# ")) == "replication-6-rules-failed"
    assert anchors("## Locust profiles\n```\n# not a heading\n```\n### Locust profiles\n") == {
        "locust-profiles",
        "locust-profiles-1",
    }


def test_every_relative_link_and_image_resolves() -> None:
    checked = [page for page in pages() if page.exists()]
    assert len(checked) >= 8, checked  # the four named pages and the docs
    assert sum(len(targets(page.read_text())) for page in checked) > 60
    assert [link for page in checked for link in broken_links(page)] == []


def test_readme_is_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MOST_LINES, (
        f"README.md has {lines} lines; keep it to what a newcomer needs and move the rest to docs/"
    )


def test_readme_links_nowhere_outside_the_repository() -> None:
    text = README.read_text()
    outside = [target for target in targets(text) if SCHEME.match(target) or "//" in target]
    bare = [line for line in prose_lines(text) if re.search(r"\b(?:https?|ftp)://|\bwww\.", line)]
    assert outside == [] and bare == []
