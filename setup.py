"""Build glue: the package layout and the wire code generated from protos/.

The .proto files are the one definition of the wire format; the Python modules
under gpubench/v1/ are generated here at build time (and by `make proto`) and
never committed.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PROTOS = ROOT / "protos"

# Top-level folder -> the package it installs as.
LAYOUT = {"gpubench": "gpubench", "gpubench.agent": "agent", "gpubench.collector": "collector"}


def generate_wire_code() -> None:
    """Run protoc (from grpcio-tools) over protos/ into gpubench/v1/."""
    import grpc_tools
    from grpc_tools import protoc

    sources = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    include = str(Path(grpc_tools.__file__).parent / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTOS}",
        f"-I{include}",
        f"--python_out={ROOT}",
        f"--pyi_out={ROOT}",
        f"--grpc_python_out={ROOT}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed on " + ", ".join(sources))


class BuildWithWireCode(build_py):
    """build_py that first generates the gRPC/protobuf modules."""

    def run(self) -> None:
        generate_wire_code()
        super().run()


def packages() -> list[str]:
    """Every package of the distribution, with its folder mapped by LAYOUT."""
    found: list[str] = []
    for package, folder in LAYOUT.items():
        found.append(package)
        found += [f"{package}.{sub}" for sub in find_packages(folder)]
    return sorted(found)


if __name__ == "__main__":  # setuptools runs this file as __main__; `make proto` imports it
    setup(
        packages=packages(),
        package_dir=LAYOUT,
        # The collector's GPU table (collector/ceilings.py reads it).
        package_data={"gpubench.collector": ["gpu_specs.json"],
                      # the results site's templates and stylesheet
                      "gpubench.collector.web": ["templates/*"]},
        cmdclass={"build_py": BuildWithWireCode},
    )
