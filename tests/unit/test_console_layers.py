"""gregor_console stays a Kafka client: of the broker's code it imports only `broker.tools`
(the admin tools' client side) and the pure hanging-transaction rules
(`coordinator/transaction/hanging.py`), and the broker imports it only where `gregor console`
runs (broker/tools/console.py, inside the function), so neither the broker nor the other
tools load aiohttp or Jinja2."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BROKER_SIDE = ("broker", "storage", "coordinator")


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at the top level) of every import in `path`."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, id(node) in top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", id(node) in top))
    return found


def test_the_console_imports_only_the_tools_of_the_broker() -> None:
    wrong = sorted(
        f"{path.relative_to(ROOT)}: {module}"
        for path in (ROOT / "gregor_console").rglob("*.py")
        for module, _ in _imports(path)
        if module.split(".")[0] in BROKER_SIDE
        and not module.startswith(("broker.tools", "coordinator.transaction.hanging"))
    )
    assert wrong == []


def test_the_broker_imports_the_console_only_when_it_runs() -> None:
    importers = sorted(
        (str(path.relative_to(ROOT)), top)
        for path in (ROOT / "broker").rglob("*.py")
        for module, top in _imports(path)
        if module.split(".")[0] in ("gregor_console", "aiohttp", "jinja2")
    )
    assert importers and {path for path, _ in importers} == {"broker/tools/console.py"}
    assert not any(top for _, top in importers)
