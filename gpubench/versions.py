"""The project's name on PyPI and its versions: of the code, the record and the protocol.

`gpubench` is one package in three parts, each in a folder of its own (the shared
`gpubench/`, `agent/gpubench/agent/` and `collector/gpubench/collector/`), so that Python,
type checkers and editors find every module at its file from the repository root;
gpubench/__init__.py holds only the Python API's names, so these constants live here.
"""

from __future__ import annotations

import importlib
import importlib.metadata

# The name pip knows the project by (pyproject.toml's project.name): PyPI's "gpubench"
# is another project. Installed, `pip install 'gpubench-keras[EXTRA]'` adds an extra's
# dependencies to this copy.
DISTRIBUTION = "gpubench-keras"


# setuptools-scm's version of a tree with no tag behind it: a `git archive` copy of a
# repository that has no tag yet, or a copy with no git at all (fallback_version).
UNTAGGED = "0.0"


def traced(version: str, commit: str | None) -> str:
    """`version`, with the commit it was built from where no tag names it ("0.0+gHASH"),
    so that a stored run (its agent_version) can be traced to its code."""
    if version == UNTAGGED and commit:
        return f"{version}+{commit if commit.startswith('g') else 'g' + commit}"
    return version


def _version() -> str:
    """The version the build stamped: the git tag's (pyproject.toml's [tool.setuptools_scm]),
    with the commit where there is no tag."""
    try:
        # Written by every build (a wheel, an image's, `pip install -e .`): the version
        # travels with the code, whatever else is installed beside it. Imported by name:
        # a checkout has no such file until a build writes it (.gitignore).
        stamped = importlib.import_module("gpubench._version")
        return traced(str(stamped.version), getattr(stamped, "commit_id", None))
    except ImportError:
        pass
    try:
        # A checkout run from its folder (PYTHONPATH) before any build wrote the file.
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return UNTAGGED  # setuptools-scm's own fallback_version: not known


# The code's version: each command's --version, the record's agent_version, the
# collector's and its backups', the image labels' (docker/build.sh).
VERSION = _version()

# The revision of protos/gpubench/v1/run.proto this code writes. Bump it when a
# field's meaning changes; the collector reads every version up to its own.
SCHEMA_VERSION = 2

# The benchmark protocol's version: runs of different versions are not compared
# unless the user asks. Bump it when anything that changes the figures changes.
BENCHMARK_VERSION = "1"

__all__ = ["BENCHMARK_VERSION", "DISTRIBUTION", "SCHEMA_VERSION", "VERSION"]
