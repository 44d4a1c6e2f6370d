"""The documentation in the repository (README.md, ARCHITECTURE.md, docs/) still says what the
code does: every relative link resolves, nothing points outside the repository, every command
it names (`make X`, `gregor SUBCOMMAND --flag`, `python -m module --flag`) and every file path
exists, and the tables taken from the code (configuration keys, dynamic keys, APIs and versions,
metrics, `gregor` commands, accepted differences, benchmarks, nemeses) match it.

The configuration key table of docs/configuration.md is checked in test_broker_config.py."""

from __future__ import annotations

import argparse
import ast
import glob
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", *DOCS.glob("*.md")])
# Markdown elsewhere in the repository whose links and references are checked too.
OTHER_MARKDOWN = [ROOT / "tests" / "chaos" / "RUNS.md"]
EXPECTED_PAGES = {
    "console.md",
    "benchmarks.md", "broker.md", "cluster.md", "configuration.md", "development.md",
    "differences.md", "fault-testing.md", "flink.md", "kafka-streams.md", "operations.md", "pyspark.md",
    "security.md", "storage.md",
}
TOP_DIRS = ("bench", "broker", "config", "coordinator", "docker", "docs", "gregor_spark", "protocol",
            "scripts", "storage", "tests")

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# What is not in the repository: the project's design and style notes, the machine's paths, and
# the reference material some notes call "seeds".
OUTSIDE = re.compile(
    r"\.\./shared|/work/|\bDESIGN(?:\.md)?\b|\bSTYLE(?:\.md)?\b|(?i:\bseeds?/|\bseed 00\d\b)"
)


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _code(text: str) -> Iterator[str]:
    """Each fenced block (backslash continuations joined) and each inline code span."""
    for block in FENCE.findall(text):
        yield block.replace("\\\n", " ")
    for span in INLINE.findall(FENCE.sub("", text)):
        yield span.replace("\n", " ")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            slug = _slug(m[1])
            n = 0
            while (slug if n == 0 else f"{slug}-{n}") in found:
                n += 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def _section(page: str, begin: str, end: str) -> str:
    text = (DOCS / page).read_text()
    start = text.index(begin) + len(begin)
    return text[start:text.index(end, start)]


# -- every page ------------------------------------------------------------------


def test_docs_holds_one_page_per_subject_and_the_readme_links_them() -> None:
    assert {p.name for p in DOCS.glob("*.md")} == EXPECTED_PAGES
    readme = (ROOT / "README.md").read_text()
    for name in EXPECTED_PAGES:
        assert f"](docs/{name})" in readme, f"README.md does not link docs/{name}"
    assert len(readme.splitlines()) <= 120, "README.md should fit on a few screens; move detail to docs/"


@pytest.mark.parametrize("page", PAGES + OTHER_MARKDOWN, ids=_rel)
def test_no_reference_outside_the_repository(page: Path) -> None:
    found = [m[0] for m in OUTSIDE.finditer(page.read_text())]
    assert not found, f"{_rel(page)} refers to what is not in the repository: {found}"


@pytest.mark.parametrize("page", PAGES + OTHER_MARKDOWN, ids=_rel)
def test_relative_links_resolve(page: Path) -> None:
    bad = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not a file
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if ROOT not in dest.parents and dest != ROOT:
            bad.append(f"{target} (outside the repository)")
        elif not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target} (no such heading)")
    assert not bad, f"{_rel(page)}: broken links: {bad}"


def _makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w.-]+):(?!=)", text, re.M))


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_make_target_named_exists(page: Path) -> None:
    targets = _makefile_targets()
    named = {t for code in _code(page.read_text())
             for t in re.findall(r"(?:^|[\s(;])make ([a-z][\w-]*)", code)}
    assert named - targets == set(), f"{_rel(page)} names make targets the Makefile lacks"


def _cli() -> argparse.ArgumentParser:
    from broker.cli import _parser

    return _parser()


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings of `parser` and of every parser below it."""
    found = set(parser._option_string_actions)
    for sub in _subcommands(parser).values():
        found |= _options(sub)
    return found


def _gregor_commands(text: str) -> Iterator[list[str]]:
    """The arguments of every `gregor ...` command line in the code of `text`."""
    for code in _code(text):
        for line in code.splitlines():
            tokens = line.split()
            for i, token in enumerate(tokens):
                if token == "gregor" or token.endswith("/gregor"):
                    args = []
                    for arg in tokens[i + 1:]:
                        if arg in ("|", "||", "&&", ";", ">") or arg.startswith("#"):
                            break
                        args.append(arg)
                    if args:
                        yield args


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_gregor_command_and_flag_named_is_accepted(page: Path) -> None:
    parser = _cli()
    commands = _subcommands(parser)
    bad = []
    for args in _gregor_commands(page.read_text()):
        first = args[0].strip("[]()")
        if first.startswith("--"):
            owner, flags = parser, [first]
        elif first in commands:
            owner, flags = commands[first], args[1:]
        else:
            bad.append(f"gregor {first}: no such command")
            continue
        known = _options(owner)
        for flag in flags:
            flag = flag.strip("[]()'\"").split("=")[0]
            if flag.startswith("--") and flag not in known:
                bad.append(f"gregor {first} {flag}")
    assert not bad, f"{_rel(page)} names what the gregor CLI does not accept: {bad}"


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__main__.py"):
        if path.exists():
            return path
    return None


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_python_module_and_flag_named_exists(page: Path) -> None:
    bad = []
    for code in _code(page.read_text()):
        for module, rest in re.findall(r"python3? -m ([\w.]+)([^\n|;#]*)", code):
            if module == "pytest":
                continue
            path = _module_file(module)
            if path is None:
                bad.append(f"{module}: no such module")
                continue
            # The flags are defined in the module or in a module of its package.
            source = "".join(p.read_text() for p in path.parent.glob("*.py"))
            for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest):
                if f'"{flag}"' not in source:
                    bad.append(f"{module} {flag}")
    assert not bad, f"{_rel(page)} names modules or flags that do not exist: {bad}"


def _tracked(pattern: str) -> bool:
    return bool(glob.glob(str(ROOT / pattern)))


def _expand_braces(path: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [q for alt in m[1].split(",") for q in _expand_braces(path[:m.start()] + alt + path[m.end():])]


@pytest.mark.parametrize("page", PAGES + OTHER_MARKDOWN, ids=_rel)
def test_every_file_path_named_exists(page: Path) -> None:
    dirs = "|".join(TOP_DIRS)
    named = re.findall(rf"(?<![\w/.<-])((?:{dirs})/[\w./*{{}},-]*[\w*}}/])", page.read_text())
    missing = sorted({p for p in named for q in _expand_braces(p) if not _tracked(q.rstrip("."))})
    assert not missing, f"{_rel(page)} names paths that are not in the repository: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_top_level_file_named_exists(page: Path) -> None:
    named = {span for span in INLINE.findall(FENCE.sub("", page.read_text()))
             if re.fullmatch(r"[\w.-]+\.(?:yml|toml|md)|Dockerfile|Makefile", span)}
    missing = sorted(name for name in named if not (ROOT / name).exists())
    assert not missing, f"{_rel(page)} names files the repository's top level lacks: {missing}"


# Names that look like broker or topic configs but belong to clients, or to Kafka alone.
NOT_BROKER_KEYS = {
    "message.timeout.ms", "transaction.timeout.ms", "sasl.mechanism", "group.instance.id",  # clients'
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",  # Kafka's, absent here
}
CONFIG_LIKE = re.compile(
    r"(?:log|offsets|transaction|group|replica|broker|metadata|ssl|sasl|auto|num|min|max|message|segment"
    r"|retention|cleanup|compression|delete|flush|leader|producer|connections|socket|default|node"
    r"|listeners?|advertised|inter|super|allow|authorizer|cluster|metrics)\.[a-z.]+(?<!\.py)"
)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_config_key_named_exists(page: Path) -> None:
    """A config name in the prose, or a key of a YAML example, is a broker key, a dynamic broker
    key or a topic config (per-listener `listener.name.<l>.` keys checked without the prefix)."""
    from broker.config import KEYS
    from storage.log_config import DYNAMIC_BROKER_CONFIGS, TOPIC_CONFIGS

    known = set(KEYS) | set(DYNAMIC_BROKER_CONFIGS) | set(TOPIC_CONFIGS) | NOT_BROKER_KEYS
    text = page.read_text()
    named = {s for s in INLINE.findall(FENCE.sub("", text)) if CONFIG_LIKE.fullmatch(s)}
    for block in re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S):
        named |= set(re.findall(r"^([a-z][\w.-]*):", block, re.M))
    named = {re.sub(r"^listener\.name\.[a-z_]+\.(?:[a-z0-9-]+\.(?=sasl\.jaas))?", "", n) for n in named}
    unknown = sorted(named - known - {"services"})  # `services:` opens a compose file example
    assert not unknown, f"{_rel(page)} names config keys Gregor does not have: {unknown}"


# -- docs/broker.md: the APIs and their versions ---------------------------------------


API_TABLE_BEGIN = "<!-- api-versions: generated from HANDLER_TABLE; tests/unit/test_docs.py prints it -->\n"


def _api_table() -> str:
    from broker.handlers import HANDLER_TABLE
    from protocol.api_keys import ApiKey

    def span(low: int, high: int) -> str:
        return f"{low}" if low == high else f"{low}-{high}"

    lines = ["| API | key | versions |", "| --- | --- | --- |"]
    for key, h in sorted(HANDLER_TABLE.items()):
        name = "".join(word.capitalize() for word in ApiKey(key).name.split("_"))
        versions = span(h.min_version, h.max_version)
        if h.advertised_max != h.max_version:
            versions += f" ({span(h.min_version, h.advertised_max)} advertised)"
        lines.append(f"| {name} | {key} | {versions} |")
    return "\n".join(lines) + "\n"


def test_broker_page_lists_every_api_served_and_its_versions() -> None:
    expected = _api_table()
    table = _section("broker.md", API_TABLE_BEGIN, "<!-- end of api-versions -->")
    assert table == expected, (
        f"docs/broker.md's API table differs from the handler table; it should be:\n{expected}"
    )
    prose = _section("broker.md", "# What the broker serves", "## APIs and versions")
    missing = [row.split(" | ")[0][2:] for row in expected.splitlines()[2:]
               if not re.search(rf"\b{row.split(' | ')[0][2:]}\b", prose)]
    assert not missing, f"docs/broker.md does not say what these APIs do: {missing}"


# -- docs/configuration.md: the dynamic broker configs ---------------------------------


def _keys(text: str) -> list[str]:
    return re.findall(r"`([\w.]+)`", text)


def test_configuration_page_lists_the_dynamic_broker_keys() -> None:
    from storage.log_config import DYNAMIC_BROKER_CONFIGS, UNUSED_DYNAMIC_BROKER_CONFIGS

    used = _keys(_section("configuration.md", "<!-- dynamic-keys:", "<!-- end of dynamic-keys -->"))
    unused = _keys(_section("configuration.md", "<!-- unused-dynamic-keys:",
                            "<!-- end of unused-dynamic-keys -->"))
    assert used == sorted(set(DYNAMIC_BROKER_CONFIGS) - set(UNUSED_DYNAMIC_BROKER_CONFIGS))
    assert unused == sorted(UNUSED_DYNAMIC_BROKER_CONFIGS)


# -- docs/operations.md: the gregor commands and the metrics ---------------------------


def test_operations_page_lists_every_gregor_command() -> None:
    table = _section("operations.md", "## The `gregor` commands", "## ")
    listed = {m.split()[0] for m in re.findall(r"^\| `gregor ([\w -]+)` \|", table, re.M)}
    assert listed == set(_subcommands(_cli()))


def _strings(node: ast.Tuple) -> list[str]:
    return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _metric_families() -> set[str]:
    """Every metric family name broker/metrics/collectors.py builds: its `kafka_...`/`gregor_...`
    strings, and PREFIX + "name" (or PREFIX + a variable taking the first items of a tuple table)."""
    tree = ast.parse((ROOT / "broker" / "metrics" / "collectors.py").read_text())
    prefixes = {
        node.targets[0].id: node.value.value for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }
    names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and re.fullmatch(r"(kafka|gregor)_[a-z_]*[a-z]", n.value)}
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        firsts = [_strings(t)[0] for t in ast.walk(function) if isinstance(t, ast.Tuple) and t.elts
                  and len(_strings(t)) == len(t.elts)]
        for op in ast.walk(function):
            if isinstance(op, ast.BinOp) and isinstance(op.left, ast.Name) and op.left.id in prefixes:
                prefix = prefixes[op.left.id]
                if isinstance(op.right, ast.Constant):
                    names.add(prefix + str(op.right.value))
                elif isinstance(op.right, ast.Name):
                    names |= {prefix + str(first) for first in firsts}
    return names


def _documented_metrics() -> list[str]:
    """The metric names of docs/operations.md's table, `..._x` written out."""
    table = _section("operations.md", "| metric | labels | meaning |", "\n\n")
    families = _metric_families()
    found = []
    for row in table.splitlines()[2:]:
        names = re.findall(r"`([\w.]+)`", row.split(" | ")[0])
        if not names:  # process_*: prometheus-client's own
            continue
        first = names[0]
        found.append(first)
        for short in names[1:]:
            if not short.startswith("..."):
                found.append(short)
                continue
            rest = short.removeprefix("...")
            cuts = [first[:i] + rest for i, c in enumerate(first) if c == "_"]
            found.append(next((c for c in cuts if c.removesuffix("_total") in families), cuts[-1]))
    return found


def test_operations_page_metrics_table_matches_the_collectors() -> None:
    families = _metric_families()
    documented = {m.removesuffix("_total") for m in _documented_metrics()}
    assert documented - families == set(), "docs/operations.md lists metrics the broker does not export"
    assert families - documented == set(), "the broker exports metrics docs/operations.md does not list"


# -- docs/differences.md: the accepted differences -----------------------------------


def test_differences_table_names_served_apis_and_valid_versions() -> None:
    from broker.handlers import HANDLER_TABLE
    from protocol.api_keys import ApiKey
    from tests.differential.compare import accepted_table

    served = {"".join(w.capitalize() for w in ApiKey(k).name.split("_")) for k in HANDLER_TABLE}
    rows = accepted_table()
    assert rows
    for api, pattern, why in rows:
        name, _, versions = api.partition(" v")
        assert name in served, f"docs/differences.md: {name} is not an API Gregor serves"
        assert not versions or re.fullmatch(r"\d+(-\d+)?", versions), api
        assert pattern and why


# -- docs/benchmarks.md: the benchmarks of make bench -----------------------------------


def test_benchmarks_page_describes_every_benchmark_of_make_bench() -> None:
    makefile = (ROOT / "Makefile").read_text()
    bench = re.search(r"^BENCH \?= ((?:.*\\\n)*.*)$", makefile, re.M)
    assert bench
    modules = set(bench[1].replace("\\\n", " ").split())
    page = (DOCS / "benchmarks.md").read_text()
    assert {m for m in modules if f"`bench/{m}.py`" not in page} == set()
    rows = set(re.findall(r"^\| ([a-z_]+): ", page, re.M)) - {"benchmark"}  # less the header
    assert rows and rows <= modules


# -- docs/fault-testing.md: the nemeses and workloads ----------------------------------


def test_fault_testing_page_names_every_nemesis_and_workload() -> None:
    from tests.chaos.nemesis import NEMESES
    from tests.chaos.workload import WORKLOADS

    page = (DOCS / "fault-testing.md").read_text()
    nemeses = _section("fault-testing.md", "- Nemeses", "\n- Workloads")
    assert set(re.findall(r"`([a-z-]+)`(?:\s+\(|,)", nemeses)) == set(NEMESES)
    for workload in WORKLOADS:
        assert f"*{workload}*" in page or f"`{workload}`" in page, workload


# -- docs/cluster.md: the compose files' variables -------------------------------------


def test_cluster_page_variables_exist_in_the_compose_files() -> None:
    sources = "".join(
        p.read_text() for p in [ROOT / "docker-compose.yml", ROOT / "docker-compose.secure.yml",
                                ROOT / "Dockerfile", *(ROOT / "docker").iterdir()]
    )
    page = (DOCS / "cluster.md").read_text()
    named = {q for v in re.findall(r"\bGREGOR_[A-Z0-9_{},]*[A-Z0-9}]", page) for q in _expand_braces(v)}
    # GREGOR_OVERRIDE_<KEY> is a family: any key, as docker/entrypoint.sh reads them.
    assert "GREGOR_OVERRIDE_" in (ROOT / "docker" / "entrypoint.sh").read_text()
    missing = sorted(v for v in named if v not in sources and not v.startswith("GREGOR_OVERRIDE_"))
    assert not missing, f"docs/cluster.md names variables the compose files do not use: {missing}"
