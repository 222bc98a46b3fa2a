"""A config cannot hurt (issue 14): self-referencing aliases, deep nesting, alias bombs and broken
tags are one problem at their line, never a traceback or a hang; a value that may be a secret is
never echoed; and whatever text the loader is given, it answers a Config or a ConfigError."""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.config.document import MAX_BYTES, MAX_DEPTH, MAX_VALUES
from exporter.config.errors import ConfigError
from exporter.config.load import load, parse
from exporter.config.schema import TOP_KEYS, Config, describe
from exporter.sources.base import SourceError
from exporter.sources.registry import NODE_KEYS
from exporter.sources.ssh import SshNode
from exporter.sources.sshconnect import read_secret

from support.cli import Cli
from support.tools import deadline
from support.tools import yaml_text as y

SRC = "cfg.yaml"
# Each hostile document below is refused in milliseconds; before the bounds some took minutes
# or never ended. A generous deadline turns such a hang into a failure instead of a stall.
DEADLINE_S = 10.0
SECRET = "Hunter2S3cr3t"  # as pasted into the wrong key: it must appear in no problem


def problems(text: str) -> list[str]:
    with deadline(DEADLINE_S), pytest.raises(ConfigError) as e:
        parse(text, SRC, {})
    return e.value.problems


def only_problem(text: str) -> str:
    [found] = problems(text)
    return found


FILE_NODE = ("nodes:", "  - {name: a, source: file, path: /x}")
SSH_NODE = ("nodes:", "  - name: a", "    source: ssh", "    host: h")  # line 5 is the next


# -- aliases -----------------------------------------------------------------------------------

CYCLE = "an alias inside the collection it names (a cycle)"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param(y("a: &a [*a]"), 1, id="sequence"),
        pytest.param(y("a: &a {b: *a}"), 1, id="mapping"),
        pytest.param(y(*FILE_NODE, "x: &x", "  - [1, [2, {deep: *x}]]"), 4, id="deep-inside"),
        pytest.param(
            y("nodes: &n", "  - {name: a, source: file, path: /x}", "  - *n"), 3, id="nodes"
        ),
        pytest.param(y("&top {nodes: *top}"), 1, id="the-document"),
    ],
)
def test_an_alias_inside_the_collection_it_names_is_one_problem(text: str, line: int) -> None:
    assert only_problem(text) == f"{SRC}:{line}: {CYCLE}"


def test_an_alias_of_a_finished_collection_is_no_cycle() -> None:
    text = y("x: &x [1, 2]", "y: [*x, *x]", *FILE_NODE)
    assert not any("cycle" in p for p in problems(text))


def bomb(levels: int, merge: bool = False) -> str:
    """The billion laughs, a level a line: nine values, then each level nine aliases of the one
    before (or a mapping merging them)."""
    names = [f"l{i}" for i in range(levels)]
    first = (
        "{" + ", ".join(f"k{i}: x" for i in range(9)) + "}"
        if merge
        else "[" + ", ".join(["x"] * 9) + "]"
    )
    lines = [f"{names[0]}: &{names[0]} {first}"]
    for prev, name in itertools.pairwise(names):
        aliases = ", ".join([f"*{prev}"] * 9)
        body = f"{{<<: [{aliases}]}}" if merge else f"[{aliases}]"
        lines.append(f"{name}: &{name} {body}")
    return y(*lines)


@pytest.mark.parametrize("merge", [False, True], ids=["aliases", "merge-keys"])
@pytest.mark.parametrize("levels", [6, 12])
def test_an_alias_bomb_is_one_problem_at_the_line_past_the_cap(levels: int, merge: bool) -> None:
    """Six levels in a few hundred bytes once took 6 s and 274 MB, twelve never ended: now
    each node's values as its aliases expand are counted once, and the level whose count
    crosses MAX_VALUES is the problem."""
    text = bomb(levels, merge)
    assert len(text) < 1000
    size, line = (19 if merge else 10), 1  # the values of line 1, then of each line after
    while size <= MAX_VALUES:
        size, line = (3 if merge else 1) + 9 * size, line + 1
    tracemalloc.start()
    try:
        found = problems(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert line == (5 if merge else 6)
    assert found == [
        f"{SRC}:{line}: expands to more than {MAX_VALUES:,} values (an alias counts as all it stands for)"
    ]
    assert peak < 10_000_000, peak


def test_a_config_that_repeats_a_node_by_alias_is_read() -> None:
    """Aliases are fine below the cap: 500 nodes from one anchor, each its own problem line."""
    text = y(
        "base: &b {source: file, path: /x, name: a}",
        "nodes: [" + ", ".join(["*b"] * 500) + "]",
    )
    found = problems(text)
    assert found[0] == f"{SRC}:1: base: unknown key 'base'"
    assert found[1:] == [
        f"{SRC}:1: nodes[{i}].name: node 'a' is defined twice" for i in range(1, 500)
    ]


def sized(extra: int) -> str:
    """A document of MAX_VALUES + extra values as its aliases expand."""
    # top 1, key a 1, a's list 1 + 100, key b 1, b's list 1 + 101 per alias + one per scalar
    aliases = (MAX_VALUES - 4) // 101 - 1
    scalars = MAX_VALUES + extra - 4 - 101 * (aliases + 1)
    assert scalars >= 0
    items = ["*a"] * aliases + ["0"] * scalars
    return y("a: &a [" + ", ".join(["x"] * 100) + "]", "b: [" + ", ".join(items) + "]")


def test_the_value_cap_is_exact() -> None:
    at_cap = problems(sized(0))
    assert not any("expands to more than" in p for p in at_cap), at_cap[:3]
    # past the cap only as a whole: the top-level mapping's line
    assert only_problem(sized(1)).startswith(f"{SRC}:1: expands to more than {MAX_VALUES:,}")


def test_a_problem_under_an_alias_has_its_line() -> None:
    text = y("base: &b", "  source: file", "  path: 5", "nodes:", "  - {<<: *b, name: a}")
    assert problems(text) == [
        f"{SRC}:1: base: unknown key 'base'",
        f"{SRC}:3: nodes[0].path: must be a path, got 5",
    ]


# -- nesting -----------------------------------------------------------------------------------


def nested(kind: str, levels: int) -> str:
    """`levels` collections inside one another below the top-level key `x`: the document is
    levels + 1 deep."""
    if kind == "brackets":
        return y("x: " + "[" * levels + "]" * levels)
    if kind == "flow-mappings":
        return y("x: " + "{a: " * levels + "1" + "}" * levels)
    if kind == "block-mappings":
        return y("x:", *(f"{'  ' * (i + 1)}k{i}:" for i in range(levels)))
    assert kind == "block-sequences"
    return y("x:", *(f"{'  ' * i}  -" for i in range(levels)))


KINDS_OF_NESTING = ["brackets", "flow-mappings", "block-mappings", "block-sequences"]


@pytest.mark.parametrize("kind", KINDS_OF_NESTING)
@pytest.mark.parametrize("far", [False, True], ids=["just-past", "far-past"])
def test_deep_nesting_is_one_problem_at_its_line(kind: str, far: bool) -> None:
    flow = kind in {"brackets", "flow-mappings"}
    # (3,000 block levels would be over MAX_BYTES of indentation)
    levels = (3000 if flow else 700) if far else MAX_DEPTH
    found = only_problem(nested(kind, levels))
    # the collection one level too deep: in flow on line 1, in block style on its own line
    line = 1 if flow else MAX_DEPTH + 1
    assert found == f"{SRC}:{line}: nested deeper than {MAX_DEPTH} levels", found


@pytest.mark.parametrize("kind", KINDS_OF_NESTING)
def test_nesting_up_to_the_cap_is_read(kind: str) -> None:
    """MAX_DEPTH levels are read as any document is: the problems are about its keys."""
    found = problems(nested(kind, MAX_DEPTH - 1))
    assert not any("nested deeper" in p for p in found), found
    assert f"{SRC}:1: x: unknown key 'x'" in found


def test_nesting_through_aliases_is_bounded_too() -> None:
    """Each level one alias of the one before: shallow text, a deep value (which repr, json and
    every recursive walk would choke on)."""
    lines = ["l0: &l0 [x]", *(f"l{i}: &l{i} [*l{i - 1}]" for i in range(1, 200))]
    assert only_problem(y(*lines)) == (
        f"{SRC}:{MAX_DEPTH + 1}: nested deeper than {MAX_DEPTH} levels through its aliases"
    )


# -- other documents PyYAML itself would raise on or stall over --------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("!!int x", "the value does not read as !!int"),
        ("!!bool x", "the value does not read as !!bool"),
        ("!!float x", "the value does not read as !!float"),
        ("!!timestamp x", "the value does not read as !!timestamp"),
        ("!!int " + "1" * 5000, "an integer written in more than 100 characters"),
        # base-60: quadratic to construct, a minute for 400 KB
        ("1" + ":1" * 20_000, "an integer written in more than 100 characters"),
        ("0x" + "f" * 20_000, "an integer written in more than 100 characters"),
    ],
)
def test_a_value_its_tag_cannot_construct_is_one_problem(value: str, message: str) -> None:
    assert only_problem(y(*FILE_NODE, f"listen: {value}")) == (
        f"{SRC}:3: not valid YAML: {message}"
    )


def test_a_bucket_bound_past_the_microseconds_is_a_problem() -> None:
    assert only_problem(y(*FILE_NODE, "duration_buckets: [1.0e+308]")) == (
        f"{SRC}:3: duration_buckets: must be a list of increasing positive seconds, got [1e+308]"
    )


def test_a_key_with_a_line_break_stays_on_its_problem_line() -> None:
    assert problems(y('"a\\nb": 1', *FILE_NODE)) == [f"{SRC}:1: a\\nb: unknown key 'a\\nb'"]


def test_a_control_character_is_a_problem_at_its_line() -> None:
    assert only_problem(y(*FILE_NODE, "unit: a\x01b")) == (
        f"{SRC}:3: not valid YAML: unacceptable character #x0001: special characters are not "
        "allowed"
    )


def test_an_oversized_text_is_one_problem() -> None:
    text = y(*FILE_NODE, "# " + "x" * MAX_BYTES)
    assert only_problem(text) == f"{SRC}: over {MAX_BYTES:,} characters: not a config"


def test_load_reads_no_more_than_the_cap(tmp_path: Path) -> None:
    """`check-config /dev/zero` ends, with one problem (it is no regular file); so does a
    file past the cap."""
    with deadline(DEADLINE_S), pytest.raises(ConfigError) as e:
        load(Path("/dev/zero"))
    assert e.value.problems == ["/dev/zero: cannot read: not a regular file (a character device)"]
    big = tmp_path / "big.yaml"
    big.write_bytes(b"# a comment\n" * (MAX_BYTES // 10))
    with deadline(DEADLINE_S), pytest.raises(ConfigError) as e:
        load(big)
    assert e.value.problems == [f"{big}: over {MAX_BYTES:,} bytes: not a config"]


# -- secrets -----------------------------------------------------------------------------------

# `SECRET` pasted into every key that may hold one, and around it, in every shape of mistake
SECRET_MISTAKES = [
    ("password_env", f"'{SECRET} x'"),
    ("password_env", f"9{SECRET}"),
    ("password_env", f"[{SECRET}]"),
    ("password_env", f"{{{SECRET}: 1}}"),
    ("password_file", f"[{SECRET}]"),
    ("password_file", f"pw${SECRET}"),
    ("password_file", f"${{{SECRET}}}/pw"),
    ("password_file", f"*{SECRET}"),  # an undefined alias
    ("password_file", f"!{SECRET} x"),  # an unknown tag
    ("password_file", f"!!int {SECRET}"),
    ("password_file", f"&{SECRET} [*{SECRET}]"),  # a cycle
    ("client_keys", f"{SECRET}"),
    ("client_keys", f"[/k, ${SECRET}]"),
    ("client_keys", f"[[{SECRET}]]"),
    ("password", SECRET),
    ("Passphrase", SECRET),
]


@pytest.mark.parametrize(("key", "value"), SECRET_MISTAKES)
def test_a_value_that_may_be_a_secret_is_never_echoed(key: str, value: str) -> None:
    found = problems(y(*SSH_NODE, f"    {key}: {value}"))
    assert found
    assert all(p.startswith(f"{SRC}:5: ") for p in found), found
    assert not [p for p in found if SECRET in p]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(y(f"nodes: {{name: a, password_file: {SECRET}}}"), id="nodes-a-mapping"),
        pytest.param(y(f"- {{nodes: [{{password_env: '{SECRET}'}}]}}"), id="document-a-list"),
        pytest.param(
            y("nodes:", f"  - {{name: a, source: {{client_keys: [{SECRET}]}}}}"), id="in-source"
        ),
        # a missed colon in a flow mapping: key and value are one key
        pytest.param(
            y("nodes:", f"  - {{name: a, source: ssh, host: h, password_file {SECRET}}}"),
            id="one-key",
        ),
        pytest.param(
            y("nodes:", f"  - {{name: a, source: file, path: /x, password {SECRET}: x}}"),
            id="one-key-in-a-file-node",
        ),
        pytest.param(y(*FILE_NODE, f"password {SECRET}: 1"), id="one-key-at-the-top"),
    ],
)
def test_a_secret_inside_a_value_shown_is_never_echoed(text: str) -> None:
    found = problems(text)
    assert found
    assert not [p for p in found if SECRET in p]


def test_an_unset_service_variable_is_named_others_are_not() -> None:
    service = only_problem(y(*SSH_NODE, "    password_file: ${CREDENTIALS_DIRECTORY}/pw"))
    assert service.endswith("must be a path ($CREDENTIALS_DIRECTORY is not set)")
    other = only_problem(y(*SSH_NODE, f"    password_file: /pw${SECRET}"))
    assert (
        other == f"{SRC}:5: nodes[0].password_file: must be a path (a variable it names is not set)"
    )


def test_check_config_never_prints_a_secret(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "c.yaml"
    lines = ["nodes:"]
    # the mistakes that leave the document valid YAML, so that each is a problem of its own
    for i, (key, value) in enumerate(SECRET_MISTAKES[:7]):
        lines += [f"  - name: n{i}", "    source: ssh", "    host: h", f"    {key}: {value}"]
    path.write_text(y(*lines))
    code, out, err = cli("check-config", str(path))
    assert code == 1
    assert err.count(f"{path}:") >= 1 + 7, err  # the count, then a problem per node
    assert SECRET not in out + err


def test_a_secret_in_the_right_key_is_in_no_problem_description_or_source_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A password pasted as password_env or password_file is a valid name or path: the config
    reads, and neither describe() nor the error the node then fails with shows it."""
    monkeypatch.chdir(tmp_path)  # (where no file is named like the secret)
    text = y(
        "nodes:",
        f"  - {{name: e, source: ssh, host: h, password_env: {SECRET}}}",
        f"  - {{name: f, source: ssh, host: h, password_file: {SECRET}}}",
    )
    with deadline(DEADLINE_S):
        config = parse(text, SRC, {})
    assert SECRET not in "\n".join(describe(config))
    errors = []
    for node in config.nodes:
        assert isinstance(node, SshNode)
        with pytest.raises(SourceError) as e:
            read_secret(node, {})
        errors.append(str(e.value))
    assert errors == [
        "node e: ssh root@h:22: its password_env variable is not set",
        "node f: ssh root@h:22: cannot read its password_file: No such file or directory",
    ]


def test_a_password_file_that_is_not_utf8_is_a_source_error(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_bytes(b"\xff" + SECRET.encode())
    node = SshNode("a", "h", "sm-llm.service", password_file=path)
    with pytest.raises(SourceError) as e:
        read_secret(node, {})
    assert str(e.value) == f"node a: ssh root@h:22: its password_file {path} is not UTF-8"


# -- whatever the text: a Config or a ConfigError whose problems each name the source ----------


def check_outcome(text: str) -> Config | ConfigError:
    try:
        with deadline(DEADLINE_S):
            return parse(text, SRC, {})
    except ConfigError as e:
        assert e.source == SRC
        assert e.problems
        for p in e.problems:
            assert p.startswith(SRC), p
            assert "\n" not in p, p
        return e


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# characters YAML gives meaning to, so random text reaches the parser's corners
YAML_CHARS = "[]{}:,-?&*!|>'\"#%@`. \n\t\\ax0$<=~"


@FUZZ
@given(st.text(max_size=300))
def test_any_text_is_a_config_or_a_config_error(text: str) -> None:
    check_outcome(text)


@FUZZ
@given(st.text(alphabet=YAML_CHARS, max_size=300))
def test_any_yaml_like_text_is_a_config_or_a_config_error(text: str) -> None:
    check_outcome(text)


@st.composite
def aliased_documents(draw: st.DrawFn) -> str:
    """Anchored collections, each of aliases to earlier, later (undefined) or its own anchors,
    repeated and nested, with plain values and merge keys."""
    count = draw(st.integers(1, 14))
    lines = []
    for i in range(count):
        refs = draw(
            st.lists(
                st.one_of(
                    st.integers(0, count).map(lambda j: f"*a{j}"),
                    st.sampled_from(["x", "1", "~", "[]", "{}", "[x, [y]]"]),
                ),
                max_size=12,
            )
        )
        depth = draw(st.integers(0, 80))
        body = "[" * depth + "[" + ", ".join(refs) + "]" + "]" * depth
        if draw(st.booleans()) and refs:
            body = (
                "{<<: [" + ", ".join(r for r in refs if r.startswith("*")) + "], k: " + body + "}"
            )
        lines.append(f"a{i}: &a{i} {body}")
    return y(*lines)


@FUZZ
@given(aliased_documents())
def test_any_aliased_document_is_a_config_or_a_config_error(text: str) -> None:
    check_outcome(text)


# values of every type, for every key
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["now", "-24h", ":10027", "sm-llm", "/x", "$UNSET/x", "${HOME}"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
# a secret-looking value for the keys that may hold one
SECRET_VALUES = st.recursive(
    st.sampled_from([SECRET, f"x {SECRET}", f"${SECRET}", f"/run/${{{SECRET}}}", f"9{SECRET}"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.just(SECRET), inner, max_size=1),
    max_leaves=4,
)
SECRET_KEYS = {"password_file", "password_env", "client_keys"}


# a node of each source that reads, to put wrong values in
GOOD_NODE = {
    "file": {"path": "/x"},
    "journal": {},
    "ssh": {"host": "h"},
    "bad": {"host": "h"},
}


@st.composite
def configs_of_every_type(draw: st.DrawFn) -> Any:
    """A config of good nodes and top-level keys, some of their values replaced by values of
    any type (a secret-looking one in each key that may hold a secret)."""
    top = draw(st.dictionaries(st.sampled_from(sorted(TOP_KEYS - {"nodes"})), VALUES, max_size=5))
    nodes = []
    for i in range(draw(st.integers(0, 3))):
        source = draw(st.sampled_from(sorted(GOOD_NODE)))
        node: dict[str, Any] = {"name": f"n{i}", "source": source, **GOOD_NODE[source]}
        for key in sorted(NODE_KEYS.get(source, NODE_KEYS["ssh"])):
            # half the keys each time; name and source less often, or few nodes would be read
            if draw(st.integers(0, 9 if key in {"name", "source"} else 1)) == 0:
                node[key] = draw(SECRET_VALUES if key in SECRET_KEYS else VALUES)
        nodes.append(node)
    top["nodes"] = draw(st.sampled_from([nodes, nodes[:1], {"x": nodes}, None, "nodes"]))
    return top


@FUZZ
@given(configs_of_every_type(), st.sampled_from(["block", "flow"]))
def test_every_key_with_a_value_of_any_type_is_a_config_or_a_config_error(
    data: Any, style: str
) -> None:
    text = yaml.safe_dump(data, default_flow_style=style == "flow")
    outcome = check_outcome(text)
    shown = "\n".join(describe(outcome) if isinstance(outcome, Config) else outcome.problems)
    assert SECRET not in shown


@st.composite
def jumbles(draw: st.DrawFn) -> str:
    """Collection tokens, anchors and aliases in any order, after a run of openers (deep as no
    config is, shallow as any)."""
    opener = draw(st.sampled_from(["[", "{a: ", "- ", "&a [", "[*a, ", "{? "]))
    parts = st.sampled_from(
        ["[", "]", "{", "}", "a: ", "- ", "*a", "&a ", "&b ", "*b", ", ", "\n", "x"]
    )
    depth = draw(st.integers(0, 400) | st.integers(0, 5))
    return opener * depth + "".join(draw(st.lists(parts, max_size=300)))


@FUZZ
@given(jumbles())
def test_any_jumble_of_collections_is_a_config_or_a_config_error(text: str) -> None:
    check_outcome(text)
