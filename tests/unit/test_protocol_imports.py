"""`protocol/` does no I/O: bytes in, typed objects out.

Walks every module under protocol/ with `ast` (no import side effects) and
fails if any of them imports an I/O or event-loop module, or reaches up into
the broker or storage layers. Data flows socket → protocol → broker → storage,
never the other way round.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PROTOCOL_DIR = Path(__file__).resolve().parents[2] / "protocol"
FORBIDDEN = {"asyncio", "socket", "uvloop", "selectors", "broker", "storage", "coordinator"}


def _modules() -> list[Path]:
    return sorted(PROTOCOL_DIR.rglob("*.py"))


def imported_roots(path: Path) -> set[tuple[str, int]]:
    """Top-level package names imported by one source file, with line numbers."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update((alias.name.split(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add((arg.value.split(".")[0], node.lineno))
    return found


def _is_dynamic_import(node: ast.Call) -> bool:
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "__import__") or (
        isinstance(f, ast.Attribute) and f.attr == "import_module"
    )


def test_protocol_package_exists() -> None:
    assert (PROTOCOL_DIR / "__init__.py").exists()
    assert len(_modules()) >= 5


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PROTOCOL_DIR)))
def test_protocol_module_does_no_io(path: Path) -> None:
    bad = sorted((name, line) for name, line in imported_roots(path) if name in FORBIDDEN)
    assert not bad, f"{path.name} imports {', '.join(f'{n} (line {ln})' for n, ln in bad)}"


def test_the_checker_sees_every_import_form(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import os, asyncio.streams\n"
        "from socket import socket\n"
        "from . import framing\n"
        "def f():\n"
        "    import uvloop\n"
        "    __import__('selectors')\n"
        "    importlib.import_module('broker.server')\n"
        "if TYPE_CHECKING:\n"
        "    from storage.log import Log\n"
    )
    names = {n for n, _ in imported_roots(src)}
    assert FORBIDDEN - {"coordinator"} <= names
    assert "framing" not in names and "os" in names
