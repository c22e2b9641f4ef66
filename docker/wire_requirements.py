"""Print what the wire code in a built wheel needs at run time, for `pip install -r`.

    python3 docker/wire_requirements.py /out/gpubench-0.1.0-py3-none-any.whl

The wheel build generates gpubench/v1/ with the newest grpcio-tools it finds, and the
generated modules refuse to import under an older grpcio or protobuf than the generator's
(GRPC_GENERATED_VERSION in *_pb2_grpc.py, ValidateProtobufRuntimeVersion in *_pb2.py). A
base image may already hold older ones (a GPU machine's own Python does), which satisfy
the package's looser requirements: the images install these lines after the wheel.
Standard library only.
"""

from __future__ import annotations

import re
import sys
import zipfile

GRPC = re.compile(r"GRPC_GENERATED_VERSION\s*=\s*['\"]([0-9.]+)['\"]")
PROTOBUF = re.compile(r"ValidateProtobufRuntimeVersion\(\s*[\w.]+,\s*(\d+),\s*(\d+),\s*(\d+),")


def wire_requirements(wheel: str) -> list[str]:
    """The grpcio and protobuf requirements of the generated modules in `wheel`."""
    grpc: set[tuple[int, ...]] = set()
    protobuf: set[tuple[int, ...]] = set()
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if not re.fullmatch(r"gpubench/v1/\w+_pb2(_grpc)?\.py", name):
                continue
            text = archive.read(name).decode("utf-8")
            grpc |= {tuple(int(n) for n in m.split(".")) for m in GRPC.findall(text)}
            protobuf |= {tuple(int(n) for n in m) for m in PROTOBUF.findall(text)}
    if not protobuf:
        raise SystemExit(f"wire_requirements: {wheel} holds no generated gpubench/v1 modules")
    found = []
    if grpc:
        found.append(f"grpcio>={'.'.join(map(str, max(grpc)))}")
    newest = max(protobuf)
    # The generated code runs on protobuf runtimes of its own major version.
    found.append(f"protobuf>={'.'.join(map(str, newest))},<{newest[0] + 1}")
    return found


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.strip().splitlines()[2].strip())
    print("\n".join(wire_requirements(sys.argv[1])))
