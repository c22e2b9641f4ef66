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

# Where each part's packages live: the folder a module lives in is its import path below
# these roots (agent/gpubench/agent/cli.py is gpubench.agent.cli). An image copies in
# only the parts it runs; a part whose folder is absent is left out of the wheel.
PARTS = {"gpubench": ROOT, "gpubench.agent": ROOT / "agent",
         "gpubench.collector": ROOT / "collector"}
# Each part's command.
COMMANDS = {"gpubench": "gpubench = gpubench.cli:main",
            "gpubench.agent": "gpubench-agent = gpubench.agent.cli:main",
            "gpubench.collector": "gpubench-collector = gpubench.collector.cli:main"}


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


def packages() -> tuple[list[str], dict[str, str]]:
    """Every package of the parts present, and the folder of each part's root package."""
    found: list[str] = []
    folders: dict[str, str] = {}
    for package, root in PARTS.items():
        folder = root.joinpath(*package.split("."))
        # `gpubench` is a regular package whose __path__ takes in the other parts' folders
        # (gpubench/__init__.py); the agent and the collector are packages within it.
        if not any(folder.glob("*.py")):
            continue
        folders[package] = str(folder.relative_to(ROOT))
        found.append(package)
        found += [f"{package}.{sub}" for sub in find_packages(str(folder))]
    return sorted(found), folders


if __name__ == "__main__":  # setuptools runs this file as __main__; `make proto` imports it
    found, folders = packages()
    setup(
        packages=found,
        package_dir=folders,
        entry_points={"console_scripts": [COMMANDS[part] for part in folders]},
        # The collector's GPU table (collector/gpubench/collector/ceilings.py reads it).
        package_data={"gpubench.collector": ["gpu_specs.json"],
                      # the results site's templates and stylesheet
                      "gpubench.collector.web": ["templates/*"]},
        cmdclass={"build_py": BuildWithWireCode},
    )
