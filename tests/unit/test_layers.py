"""The layout holds: no module imports one above it in the pipeline, no source kind imports a
sibling, each vendor library is imported in one module, and no private name crosses a module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "exporter"
ROOT = PACKAGE.parent

# Bottom to top; a module may import only modules of a lower level (its own level: none of
# them, so the source kinds stay apart). The source kinds' records and their registry
# (`exporter.sources.registry`) sit below the config, which reads them; the readers they name
# sit above it, imported by name only when a node is read.
LEVELS: list[set[str]] = [
    {"exporter.compiled._speedups", "exporter.compiled._accounting"},
    {
        "exporter",
        *(f"exporter.{p.name}" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()),
        "exporter.base.times",
        "exporter.base.records",
        "exporter.base.logs",
        "exporter.daemon.logger",
    },
    {"exporter.parse.prefix", "exporter.parse.context", "exporter.parse.router"},
    {"exporter.parse.tokens", "exporter.parse.contract", "exporter.accounting.contract"},
    {"exporter.parse.extras"},
    {"exporter.compiled.switch"},
    {
        "exporter.daemon.clock",
        "exporter.exposition.build",
        "exporter.daemon.hup",
        "exporter.daemon.repeats",
        "exporter.ingest.memory",
        "exporter.base.outfile",
        "exporter.checkpoint.shapes",
        "exporter.checkpoint.layout",
    },
    {"exporter.base.kinds", "exporter.startup.phases", "exporter.checkpoint.store"},
    {
        "exporter.parse.parser",
        "exporter.checkpoint.migrations",
        "exporter.checkpoint.schema",
        "exporter.startup.vllm",
        "exporter.accounting.settings",
        "exporter.accounting.sweep",
        "exporter.accounting.idle",
    },
    {"exporter.startup.llama"},
    {"exporter.accounting.figures", "exporter.accounting.history"},
    {"exporter.accounting.watermark", "exporter.accounting.intake"},
    {"exporter.accounting.accounting"},
    {"exporter.accounting.lanes", "exporter.exposition.families", "exporter.exposition.numbers"},
    {"exporter.config.redact", "exporter.config.files", "exporter.config.values"},
    {"exporter.config.errors", "exporter.config.checker"},
    {"exporter.sources.base", "exporter.sources.kind"},
    {
        "exporter.sources.file",
        "exporter.sources.journal",
        "exporter.sources.remote",
        "exporter.sources.ssh",
        "exporter.sources.inittimeline",
    },
    {"exporter.sources.registry"},
    {"exporter.config.document"},
    {"exporter.config.schema"},
    {"exporter.config.load", "exporter.config.changes", "exporter.config.reference"},
    {"exporter.sources.entries"},
    {"exporter.sources.lines", "exporter.sources.parsedonce", "exporter.sources.pool"},
    {"exporter.sources.readahead"},
    {
        "exporter.sources.filereader",
        "exporter.sources.journalreader",
        "exporter.sources.sshconnect",
    },
    {"exporter.sources.sshstream", "exporter.sources.remotefiles"},
    {"exporter.sources.sshreader", "exporter.sources.remotereader"},
    {
        "exporter.ingest.step",
        "exporter.ingest.settings",
        "exporter.report.window",
        "exporter.web.svg",
        "exporter.startup.vllmwatch",
    },
    {"exporter.web.timeline"},
    {"exporter.web.document", "exporter.web.fleet"},
    {"exporter.web.status_timeline", "exporter.web.status_api"},
    {
        "exporter.startup.tables",
        "exporter.exposition.reference",
        "exporter.exposition.process",
        "exporter.report.text",
    },
    {
        "exporter.checkpoint.codec",
        "exporter.exposition.render",
        "exporter.daemon.notify",
        "exporter.web.status_page",
        "exporter.web.report_page",
    },
    {"exporter.report.openmetrics", "exporter.exposition.published"},
    {
        "exporter.web.tls_server_config",
        "exporter.web.http1",
        "exporter.web.tally",
        "exporter.web.deadlines",
        "exporter.web.listen",
    },
    {"exporter.web.webconfig"},
    {"exporter.web.tls", "exporter.web.auth", "exporter.web.routes"},
    {"exporter.web.watched"},
    {"exporter.web.gate"},
    {"exporter.web.connection"},
    {"exporter.web.server", "exporter.commands.preflight", "exporter.commands.seen"},
    {"exporter.commands.output", "exporter.commands.loading", "exporter.commands.report_options"},
    {
        "exporter.commands.backfill",
        "exporter.commands.init_timeline",
        "exporter.commands.check_config",
        "exporter.commands.known_hosts",
    },
    {
        "exporter.daemon.nodes",
        "exporter.daemon.status",
        "exporter.daemon.reload",
        "exporter.daemon.descriptors",
    },
    {"exporter.daemon.core"},
    {
        "exporter.daemon.watch",
        "exporter.daemon.supervise",
        "exporter.daemon.timelines",
        "exporter.daemon.listen",
    },
    {"exporter.daemon.apply", "exporter.daemon.resume"},
    {"exporter.daemon.publish"},
    {"exporter.daemon.loop", "exporter.daemon.reconfigure"},
    {"exporter.daemon.daemon"},
    {"exporter.commands.demo", "exporter.commands.run", "exporter.commands.report"},
    {"exporter.cli"},
    {"exporter.entry"},
    {"exporter.__main__"},
]
LEVEL = {m: i for i, ms in enumerate(LEVELS) for m in ms}
VENDORS = {"systemd.journal", "systemd.daemon", "asyncssh", "prometheus_client", "yaml", "bcrypt"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, names, line) of every import in the file, in functions too."""
    out: list[tuple[str, list[str], int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names], node.lineno))
    return out


def test_every_module_has_a_level() -> None:
    assert sorted(set(MODULES) - set(LEVEL)) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_one_above_it_or_a_sibling(name: str) -> None:
    bad = []
    for module, names, line in imports(MODULES[name]):
        targets = [module] + [f"{module}.{n}" for n in names if f"{module}.{n}" in LEVEL]
        for target in targets:
            whole_package = target == "exporter" and all(f"exporter.{n}" in LEVEL for n in names)
            if (
                target in LEVEL
                and target != name
                and LEVEL[target] >= LEVEL[name]
                and not (whole_package and names)
            ):
                bad.append(f"{name}:{line} imports {target}")
    assert bad == []


def imported_by(name: str) -> set[str]:
    """The modules of the package `name` imports, and those they import, and so on (imports in
    functions too)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for module, names, _ in imports(MODULES[todo.pop()]):
            for target in [module, *(f"{module}.{n}" for n in names)]:
                if target in MODULES and target not in seen:
                    seen.add(target)
                    todo.append(target)
    return seen


def test_config_imports_the_source_kinds_but_no_reader() -> None:
    """The config reads the source kinds' records (their settings, keys and checks) through
    their registry, and nothing that reads a journal: loading a config needs neither asyncssh
    nor systemd-python."""
    from exporter.sources.registry import KINDS

    readers = {k.reader for k in KINDS.values() if k.reader is not None}
    assert readers and readers <= set(MODULES)
    config = [name for name in MODULES if name.startswith("exporter.config.")]
    assert config
    reached = set().union(*(imported_by(name) for name in config))
    assert "exporter.sources.registry" in reached
    assert sorted(reached & readers) == []
    vendors = {"asyncssh", "systemd"}
    assert [
        f"{name} imports {module}"
        for name in sorted(reached)
        for module, _, _ in imports(MODULES[name])
        if module.split(".")[0] in vendors
    ] == []


def test_each_vendor_library_is_imported_in_one_module() -> None:
    where: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        for module, names, _ in imports(path):
            imported = [module] + [f"{module}.{n}" for n in names]
            for vendor in VENDORS:
                if any(m == vendor or m.startswith(vendor + ".") for m in imported):
                    where.setdefault(vendor, set()).add(name)
    assert {v: sorted(ms) for v, ms in where.items() if len(ms) > 1} == {}
    assert where["asyncssh"] == {"exporter.sources.sshconnect"}
    assert where["yaml"] == {"exporter.config.document"}
    assert where["prometheus_client"] == {"exporter.exposition.reference"}


def private_uses(path: Path) -> list[str]:
    """Names with a leading underscore taken from another exporter module."""
    bad = []
    for module, names, line in imports(path):
        if module.startswith("exporter"):
            bad += [
                f"{path.name}:{line}: {module}.{n}"
                for n in names
                if n.startswith("_") and not n.startswith("__") and f"{module}.{n}" not in LEVEL
            ]
    tree = ast.parse(path.read_text())
    aliases = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("exporter")
        for a in n.names
    }
    aliases |= {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import)
        for a in n.names
        if a.name.startswith("exporter")
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            bad.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    return bad


@pytest.mark.parametrize(
    "path",
    sorted(
        [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    ),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_private_name_is_used_outside_its_module(path: Path) -> None:
    assert private_uses(path) == []


# The private names of other libraries' objects used here: namedtuple's API, systemd-python's
# reader base class and its unconverted reads, the environment's mapping type.
FOREIGN_PRIVATE = {
    *("_replace", "_fields", "_asdict", "_make"),
    *("_Reader", "_get", "_next", "_previous", "_get_realtime", "_get_cursor", "_get_monotonic"),
    "_Environ",
}


def defined_private(tree: ast.Module) -> set[str]:
    """The underscore names a module defines: functions, classes, and attributes set on self."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if n.startswith("_")}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_private_attribute_is_reached_from_another_module(name: str) -> None:
    """`other._x` only where this module defines `_x`: a class's private state stays in the
    module that owns it."""
    tree = ast.parse(MODULES[name].read_text())
    own = defined_private(tree) | FOREIGN_PRIVATE
    bad = [
        f"{name}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        and node.attr not in own
    ]
    assert bad == []
