"""The shape of broker/, checked over the source: the rooms stay rooms, and the rooms stand
on floors with every import going down.

Every import counts, also those under `if TYPE_CHECKING:` and inside functions."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BROKER = ROOT / "broker"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in sorted(BROKER.rglob("*.py"))}


def _imported(path: Path) -> set[str]:
    """Every module `path` imports, by its full dotted name (`from a import b` names a.b when
    b is a module, else a)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            base = node.module or ""
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return found


def _owner(name: str) -> str | None:
    """The broker module `name` is, or lies in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


GRAPH = {
    module: {o for o in map(_owner, _imported(path)) if o is not None and o != module}
    for module, path in MODULES.items()
}


def _cycle() -> list[str] | None:
    """One import cycle among broker modules, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for dep in sorted(GRAPH[module]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(GRAPH):
        if module not in state and (found := visit(module)) is not None:
            return found
    return None


def test_the_module_graph_is_found() -> None:
    assert "broker.server" in MODULES and "broker.api.services" in MODULES
    assert "broker.api.context" in GRAPH["broker.handlers.produce"]


def test_no_import_cycle_of_any_length_among_broker_modules() -> None:
    assert _cycle() is None, " -> ".join(_cycle() or [])


def test_only_the_cli_imports_the_composition_root() -> None:
    importers = sorted(m for m, deps in GRAPH.items() if "broker.server" in deps)
    assert importers == ["broker.cli"]


def test_handlers_reach_coordinators_only_through_the_ports() -> None:
    wrong = {
        m: sorted(d for d in deps if d.startswith(("broker.coordination", "broker.server")))
        for m, deps in GRAPH.items() if m.startswith("broker.handlers")
    }
    assert {m: d for m, d in wrong.items() if d} == {}


def test_the_ports_import_no_handler_and_no_implementation_imports_the_ports_users() -> None:
    users = {m for m in MODULES if m.startswith("broker.handlers")} | {"broker.front.connection"}
    implementations = {m for m in MODULES if not m.startswith(("broker.handlers", "broker.server"))}
    wrong = sorted((m, d) for m in implementations - users - {"broker.cli"} for d in GRAPH[m] & users)
    assert wrong == []


WHOLE_BROKER = re.compile(r"ctx\.broker\b|: Broker\b")


def test_no_line_reaches_a_whole_broker() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in MODULES.values()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if WHOLE_BROKER.search(line)
    ]
    assert offenders == []


# The floors of broker/, the lowest first: a room (a folder, or a top-level module) imports
# only rooms on lower floors. A new room is placed here before it is used.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("base",),  # clocks, fault points, the loop watch, the caller value
    ("store",),  # the metadata image and its stores (a file, etcd)
    ("config",),
    ("security",),
    ("net",),  # the inter-broker client
    ("replication",),
    ("cluster",),
    ("api", "metrics", "dynamic_config"),  # the ports; what is counted
    ("handlers", "coordination", "tools"),
    ("front",),  # the listeners and the connection loop over the handler table
    ("server",),  # the composition root
    ("cli",),
)
FLOOR_OF = {room: n for n, rooms in enumerate(FLOORS) for room in rooms}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import between rooms that does not go to a lower floor, as `a -> b`."""
    wrong = []
    for module, deps in sorted(graph.items()):
        room = _room(module)
        for dep in sorted(deps):
            other = _room(dep)
            if room is None or other is None or other == room:
                continue
            if FLOOR_OF.get(other, len(FLOORS)) >= FLOOR_OF.get(room, -1):
                wrong.append(f"{module} -> {dep}")
    return wrong


def test_every_room_stands_on_a_floor() -> None:
    rooms = {r for r in map(_room, MODULES) if r is not None}
    assert sorted(rooms - set(FLOOR_OF)) == []
    assert sorted(set(FLOOR_OF) - rooms) == []


def test_imports_only_go_down_the_floors() -> None:
    assert upward_imports(GRAPH) == []


def test_an_upward_or_sideways_import_is_found() -> None:
    assert upward_imports({"broker.store.image": {"broker.cluster.view"}}) == [
        "broker.store.image -> broker.cluster.view"]
    assert upward_imports({"broker.api.services": {"broker.metrics.stats"}}) == [
        "broker.api.services -> broker.metrics.stats"]
    assert upward_imports({"broker.cluster.view": {"broker.store.image", "broker.cluster.image"}}) == []


# -- handlers read partitions through the view ----------------------------------------------


def log_reaches(source: str) -> list[str]:
    """Where handler code reaches a partition's log for something the read view lacks:
    `x.log.name` with a name not in LogView, or `y = x.log` without the LogView annotation."""
    from broker.api.partition_view import LOG_VIEW_MEMBERS

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "log" and node.attr not in LOG_VIEW_MEMBERS:
            found.append(f"line {node.lineno}: .log.{node.attr}")
        holds_log = isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "log"
        if holds_log and isinstance(node, ast.Assign):
            found.append(f"line {node.lineno}: .log held without the LogView annotation")
        if holds_log and isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation) != "LogView":
            found.append(f"line {node.lineno}: .log held as {ast.unparse(node.annotation)}")
    return found


def test_handlers_read_a_partitions_log_only_through_the_view() -> None:
    wrong = [f"{path.name}: {where}" for path in sorted((BROKER / "handlers").glob("*.py"))
             for where in log_reaches(path.read_text())]
    assert wrong == []
    assert not any("storage.log" in GRAPH[m] for m in GRAPH if m.startswith("broker.handlers."))


def test_a_handler_writing_to_a_log_is_caught() -> None:
    assert log_reaches("part.log.delete_records_before(3)") == ["line 1: .log.delete_records_before"]
    assert log_reaches("log = part.log") == ["line 1: .log held without the LogView annotation"]
    assert log_reaches("log: LogView = part.log\npart.log.high_watermark") == []
