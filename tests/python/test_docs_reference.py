"""The documentation's references against the code, so the pages cannot drift.

- docs/src/reference/flags.md names every flag `nereid --help` prints and every flag of
  tritonserver's list (crates/server/tests/data/tritonserver-flags.txt), and every flag it
  names is one `nereid --help` prints (or a name it says is not one).
- docs/src/architecture.md names every crate folder, and its crate table gives each crate's
  package name and workspace dependencies as its Cargo.toml does.

The model configuration fields table (docs/src/reference/model-config.md) is checked by a
Rust test beside the field list itself (crates/core/src/config/support_tests.rs).
"""

import os
import re
import subprocess
import tomllib

import pytest
from conftest import REPO_ROOT, nereid_bin

DOCS = os.path.join(REPO_ROOT, "docs", "src")
FLAGS_PAGE = os.path.join(DOCS, "reference", "flags.md")
ARCHITECTURE_PAGE = os.path.join(DOCS, "architecture.md")
TRITON_FLAGS = os.path.join(REPO_ROOT, "crates", "server", "tests", "data", "tritonserver-flags.txt")
CRATES = os.path.join(REPO_ROOT, "crates")

# A long flag as help text and the page write it: `--http-port`, `--grpc-keepalive-time`.
FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*[a-z0-9](?![\w-])")

# Names the page writes like flags that are not nereid's: Triton's OpenAI frontend's
# `--backend` (here `--openai-backend`) and the `--flag` placeholder of the syntax notes.
NOT_NEREID_FLAGS = {"--backend", "--flag"}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def flags_in(text):
    return set(FLAG.findall(text))


@pytest.fixture(scope="module")
def help_flags():
    binary = nereid_bin()
    if not os.path.exists(binary):
        pytest.fail(f"nereid binary not found at {binary}: run `cargo build --release` or set NEREID_BIN")
    out = subprocess.run(
        [binary, "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    flags = flags_in(out.stdout)
    # The help lists well over a hundred flags; a handful means the parsing broke.
    assert len(flags) > 100, out.stdout
    return flags


def test_the_flags_page_names_every_flag_of_the_help(help_flags):
    documented = flags_in(read(FLAGS_PAGE))
    missing = sorted(help_flags - documented)
    assert not missing, f"flags `nereid --help` prints that {FLAGS_PAGE} does not name: {missing}"


def test_the_flags_page_names_every_tritonserver_flag():
    documented = flags_in(read(FLAGS_PAGE))
    triton = set()
    for line in read(TRITON_FLAGS).splitlines():
        if line.strip() and not line.startswith("#"):
            triton.add("--" + line.split("\t")[0].strip())
    assert len(triton) > 80, "the tritonserver flag list did not parse"
    missing = sorted(triton - documented)
    assert not missing, f"tritonserver flags that {FLAGS_PAGE} does not name: {missing}"


def test_every_flag_the_page_names_exists(help_flags):
    documented = flags_in(read(FLAGS_PAGE))
    unknown = sorted(documented - help_flags - NOT_NEREID_FLAGS)
    assert not unknown, f"{FLAGS_PAGE} names flags `nereid --help` does not print: {unknown}"


def crate_folders():
    return sorted(
        name
        for name in os.listdir(CRATES)
        if os.path.isfile(os.path.join(CRATES, name, "Cargo.toml"))
    )


def test_the_architecture_page_names_every_crate():
    page = read(ARCHITECTURE_PAGE)
    folders = crate_folders()
    assert len(folders) > 10
    missing = [f for f in folders if f"crates/{f}" not in page]
    assert not missing, f"crate folders {ARCHITECTURE_PAGE} does not name: {missing}"


def workspace_dependencies(manifest):
    """Package name and the workspace crates of `[dependencies]` (target-specific ones too)."""
    toml = tomllib.loads(read(manifest))
    tables = [toml.get("dependencies", {})]
    tables += [t.get("dependencies", {}) for t in toml.get("target", {}).values()]
    deps = set()
    for table in tables:
        for key, spec in table.items():
            name = spec.get("package", key) if isinstance(spec, dict) else key
            if name.startswith("nereid-"):
                deps.add(name)
    return toml["package"]["name"], deps


def crate_table():
    """{folder: (package, {dependency})} from the page's table of crates."""
    rows = {}
    for line in read(ARCHITECTURE_PAGE).splitlines():
        m = re.match(r"^\|\s*`crates/([\w-]+)`\s*\|([^|]*)\|([^|]*)\|([^|]*)\|\s*$", line)
        if not m:
            continue
        folder, package, _, deps = (g.strip() for g in m.groups())
        rows[folder] = (package, set(re.findall(r"\bnereid-[a-z-]*[a-z]", deps)))
    return rows


def test_the_crate_table_matches_each_cargo_toml():
    table = crate_table()
    assert sorted(table) == crate_folders(), "one row per crate folder"
    for folder, (package, deps) in table.items():
        name, actual = workspace_dependencies(os.path.join(CRATES, folder, "Cargo.toml"))
        assert package == name, f"crates/{folder} is package {name}, the page says {package}"
        assert deps == actual, (
            f"crates/{folder} depends on {sorted(actual)}, the page says {sorted(deps)}"
        )
