"""Print the requirements of gpubench's extras, one per line, for `pip install -r`.

    python3 docker/requirements.py pyproject.toml agent
    python3 docker/requirements.py pyproject.toml agent workload \
        --replace tensorflow=tensorflow-cpu==2.21.0

The image builds install the dependencies in a layer of their own, before the sources are
copied in, so that a change to the code does not reinstall TensorFlow. pyproject.toml stays
the one list of dependencies; this reads it. `--replace NAME=REQUIREMENT` swaps one
requirement for another (the workload image on a base without TensorFlow installs the CPU
build under its own name); an empty REQUIREMENT drops it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10 (some base images): the copy pip carries
    from pip._vendor import tomli as tomllib


def requirement_name(requirement: str) -> str:
    """The normalised distribution name a requirement line starts with."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise SystemExit(f"requirements: cannot read the name of {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """The base dependencies plus those of `extras`, self-references expanded, in order."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    # An extra that names others refers to the project by its distribution name.
    own_name = requirement_name(project["name"])
    found: list[str] = []
    seen_extras: set[str] = set()

    def add(lines: list[str]) -> None:
        for line in lines:
            self_ref = re.fullmatch(r"\s*([A-Za-z0-9._-]+)\[([^\]]+)\]\s*", line)
            if self_ref and requirement_name(self_ref.group(1)) == own_name:
                for extra in self_ref.group(2).split(","):
                    add_extra(extra.strip())
            elif line not in found:
                found.append(line)

    def add_extra(extra: str) -> None:
        if extra in seen_extras:
            return
        if extra not in optional:
            raise SystemExit(f"requirements: {pyproject} has no extra {extra!r}")
        seen_extras.add(extra)
        add(optional[extra])

    add(project.get("dependencies", []))
    for extra in extras:
        add_extra(extra)
    return found


def main(argv: list[str] | None = None) -> int:
    """Print the requirement lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject", type=Path, help="the project's pyproject.toml")
    parser.add_argument("extras", nargs="*", help="extras whose dependencies to add")
    parser.add_argument(
        "--replace",
        action="append",
        default=[],
        metavar="NAME=REQUIREMENT",
        help="print REQUIREMENT instead of the requirement on NAME (empty: drop it)",
    )
    args = parser.parse_args(argv)
    replacements: dict[str, str] = {}
    for item in args.replace:
        name, sep, replacement = item.partition("=")
        if not sep:
            parser.error(f"--replace {item!r}: expected NAME=REQUIREMENT")
        replacements[requirement_name(name)] = replacement.strip()
    for line in requirements(args.pyproject, args.extras):
        line = replacements.get(requirement_name(line), line)
        if line:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
