"""ARCHITECTURE.md cannot rot silently: every module, folder, SPEC.md section and rule,
and every function or class it names, exists."""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
PAGE = (REPOSITORY / "ARCHITECTURE.md").read_text()
SPEC = (REPOSITORY / "SPEC.md").read_text()
TOP_FOLDERS = ("dht/", "chaos/", "tests/", "bench/", "locustfiles/")
NOT_CODE = (".json", ".md", ".toml", ".html")


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


def test_every_module_of_dht_is_on_the_map() -> None:
    """The code map names every module inside dht's packages (a new one goes on it)."""
    modules = {
        str(path.relative_to(REPOSITORY / "dht"))
        for path in (REPOSITORY / "dht").glob("*/*.py")
        if path.name != "__init__.py"
    }
    assert sorted(module for module in modules if f"`{module}`" not in PAGE) == []


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


def test_every_function_and_class_it_names_is_defined() -> None:
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
        if not re.search(rf"(def|class) {re.escape(name.split('.')[-1])}\b", source)
    ]
    assert undefined == []
