"""Wheels for a machine that reaches no package index, packed small for the trip.

A wheel is a zip of deflated files; its largest members (compiled libraries) shrink by a
third more under xz. `pack` writes the wheels' contents, unzipped, as one .tar.xz;
`unpack` on the other machine zips each one back into a wheel of its own name, which pip
installs as it would the original (a wheel's RECORD lists its files' hashes, not the
zip's, and the files are the same).

    python3 bench/wheelhouse.py pack .gpu/wheels.tar.xz WHEEL...
    python3 bench/wheelhouse.py unpack .gpu/wheels.tar.xz /tmp/wheels
"""

from __future__ import annotations

import argparse
import io
import lzma
import sys
import tarfile
import time
import zipfile
from pathlib import Path


def pack(out: Path, wheels: list[Path]) -> None:
    """Every member of every wheel, under the wheel's file name, in one .tar.xz."""
    start = time.monotonic()
    with lzma.open(out, "wb", preset=9 | lzma.PRESET_EXTREME) as xz, \
            tarfile.open(fileobj=xz, mode="w") as tar:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.infolist():
                    if member.is_dir():
                        continue
                    data = archive.read(member)
                    entry = tarfile.TarInfo(f"{wheel.name}/{member.filename}")
                    entry.size = len(data)
                    entry.mode = (member.external_attr >> 16) or 0o644
                    tar.addfile(entry, io.BytesIO(data))
    raw = sum(w.stat().st_size for w in wheels)
    print(f"packed {len(wheels)} wheel(s) of {raw / 1e6:.1f} MB into {out} "
          f"({out.stat().st_size / 1e6:.1f} MB) in {time.monotonic() - start:.0f} s")


def unpack(packed: Path, folder: Path) -> None:
    """Each wheel of `packed`, zipped again under its own name in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    archives: dict[str, zipfile.ZipFile] = {}
    try:
        with tarfile.open(packed, "r:xz") as tar:
            for entry in tar:
                if not entry.isfile():
                    continue
                wheel, _, name = entry.name.partition("/")
                if wheel not in archives:
                    archives[wheel] = zipfile.ZipFile(folder / wheel, "w",
                                                      zipfile.ZIP_DEFLATED, compresslevel=1)
                data = tar.extractfile(entry)
                assert data is not None
                info = zipfile.ZipInfo(name)
                info.external_attr = (entry.mode & 0o777) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archives[wheel].writestr(info, data.read())
    finally:
        for archive in archives.values():
            archive.close()
    print(f"unpacked {len(archives)} wheel(s) into {folder}")


def main(argv: list[str] | None = None) -> int:
    """The two commands."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="wheels -> one .tar.xz")
    packing.add_argument("out", type=Path)
    packing.add_argument("wheels", type=Path, nargs="+")
    unpacking = commands.add_parser("unpack", help="one .tar.xz -> wheels")
    unpacking.add_argument("packed", type=Path)
    unpacking.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "pack":
        pack(args.out, args.wheels)
    else:
        unpack(args.packed, args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
