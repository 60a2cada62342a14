"""ARCHITECTURE.md cannot rot silently: every package of dht has its section, with its
invariants and its boundary, and every module, folder, SPEC.md section and rule, and
every function or class it names, exists. It is a map of packages, not a listing of
every file: a new module needs no line here, a new package does."""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
PAGE = (REPOSITORY / "ARCHITECTURE.md").read_text()
SPEC = (REPOSITORY / "SPEC.md").read_text()
TOP_FOLDERS = ("dht/", "chaos/", "tests/", "bench/", "locustfiles/")
NOT_CODE = (".json", ".md", ".toml", ".html", ".py")


def quoted() -> list[str]:
    return re.findall(r"`([^`\n]+)`", PAGE)


def path_of(name: str) -> Path:
    """A path as the page writes it: from the repository's top for the top folders,
    else inside `dht/` (`model/ring.py`)."""
    return REPOSITORY / (name if name.startswith(TOP_FOLDERS) else f"dht/{name}")


def test_every_module_and_folder_it_names_exists() -> None:
    named = [name for name in quoted() if name.endswith((".py", "/")) and " " not in name]
    assert len(named) > 40
    missing = [name for name in named if not path_of(name).exists()]
    assert missing == []


def packages_of_dht() -> list[str]:
    return sorted(f"dht/{path.parent.name}/" for path in (REPOSITORY / "dht").glob("*/__init__.py"))


def sections() -> dict[str, str]:
    """The page's `###` sections by heading, each with its text."""
    parts = re.split(r"^### (.+)$", PAGE, flags=re.MULTILINE)
    return {
        heading: text.split("\n## ")[0]
        for heading, text in zip(parts[1::2], parts[2::2], strict=True)
    }


def test_every_package_of_dht_has_a_section_with_its_invariants_and_boundary() -> None:
    """Under each package, rust-analyzer's two paragraphs: what must stay true in it,
    and what it may import."""
    by_package = {
        package: text
        for heading, text in sections().items()
        for package in packages_of_dht()
        if heading == f"`{package}`"
    }
    assert sorted(by_package) == packages_of_dht()
    lacking = [
        package
        for package, text in by_package.items()
        if "**Architecture Invariant**" not in text or "**API Boundary**" not in text
    ]
    assert lacking == []


def test_every_top_level_module_of_dht_is_in_the_top_section() -> None:
    (top,) = [text for heading, text in sections().items() if heading.startswith("The top")]
    modules = {f"dht/{path.name}" for path in (REPOSITORY / "dht").glob("*.py")}
    modules -= {"dht/__init__.py", "dht/__main__.py"}
    assert sorted(module for module in modules if f"`{module}`" not in top) == []


def test_the_diagram_names_each_layer_that_exists() -> None:
    diagram = PAGE.split("```")[1]
    listed = {line.split()[0] for line in diagram.splitlines() if line.strip()}
    packages = {f"dht/{path.name}/" for path in (REPOSITORY / "dht").iterdir() if path.is_dir()}
    packages.discard("dht/__pycache__/")
    modules = {f"dht/{path.name}" for path in (REPOSITORY / "dht").glob("*.py")}
    modules.discard("dht/__init__.py")
    assert listed == packages | modules


def test_every_spec_section_and_rule_it_names_exists() -> None:
    sections = re.findall(r"^\| (\d+) ", PAGE, flags=re.MULTILINE)
    headings = set(re.findall(r"^## (\d+)\. ", SPEC, flags=re.MULTILINE))
    assert sorted(map(int, sections)) == list(range(1, len(headings) + 1))
    assert set(sections) == headings
    rules = re.findall(r"SPEC (\d+\.\d+)", PAGE)
    assert rules and all(f'id="rule-{rule}"' in SPEC for rule in rules)


def defined(name: str, source: str) -> bool:
    """A function or class, an attribute an object sets (`self.breaker = ...`), a
    parameter on a line of its own (`on_stored: ... = None,`), or a module's constant
    (`SYSTEM = Machine()`)."""
    escaped = re.escape(name)
    return bool(
        re.search(
            rf"(def|class) {escaped}\b|self\.{escaped}\b[^=\n]*= |^ +{escaped}: [^\n]*,$"
            rf"|^{escaped}(: [^=\n]*)? = ",
            source,
            flags=re.MULTILINE,
        )
    )


def test_every_function_class_and_attribute_it_names_is_defined() -> None:
    source = "\n".join(path.read_text() for path in (REPOSITORY / "dht").rglob("*.py"))
    names = [
        name
        for name in quoted()
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name)
        and len(name) > 1  # not `A` or `F` of `replicas=A/F`
        and re.search(r"[A-Z_.]", name)  # a class, a function_name or Class.method
        and not name.endswith(NOT_CODE)
    ]
    assert len(names) > 10
    undefined = [
        name
        for name in names
        if not defined(name.split(".")[-1], source)
        and not (name.startswith("dht.") and path_of(name.replace(".", "/")[4:] + ".py").exists())
    ]
    assert undefined == []
