"""Write the command transcripts of README.md and docs/*.md from the commands themselves.

A transcript is a fenced block under a `<!-- transcript -->` line. Its `$ COMMAND` lines
are kept; everything else in it is what the commands print now, written under each:

    <!-- transcript -->
    ```text
    $ gpubench leaderboard --model B0
    (what it prints, written by this script)
    ```

`<!-- transcript: first 7 lines -->` (or `last 7 lines`) keeps that many lines of each
command's output, and a line saying how many were left out. `--check` writes nothing and
exits 1 naming each block that differs, with the difference (`make lint` runs it).

The output is the same on every machine:
- the collector is `gpubench-collector serve --port 0 --public-read` on a new DuckDB file
  holding only the reference runs of docs/results/runs/, what `make demo` loads before
  its own run. Each is stored received at its record's own `created_at`: an import stamps
  the clock's time, which `gpubench runs show` prints;
- each block's commands run in bash, in an empty folder of their own (also $HOME), the
  checkout's commands first on PATH, with none of the user's variables but PATH: only
  $GPUBENCH_COLLECTOR, 80 columns ($COLUMNS; stdout a pipe, so no colour) and stderr
  with stdout, in the order they were written;
- the collector's address, a free port each time, is written as 127.0.0.1:50051, where
  the closing lines of `make demo` start its collector again;
- the spaces rich pads table lines with at their end are dropped.

    python scripts/transcripts.py                    # rewrite every transcript
    python scripts/transcripts.py --check            # are they current?
    python scripts/transcripts.py --check README.md  # only these files
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from demo import stop  # the demo's own stop of its collector: SIGTERM, then SIGKILL

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
REFERENCE_RUNS = ROOT / "docs" / "results" / "runs"
REGENERATE = "python scripts/transcripts.py"
BIN = Path(sys.executable).parent  # the commands installed beside this interpreter
SHOWN_ADDRESS = "127.0.0.1:50051"
SUBMITTER = "reference"  # as make demo imports them
WIDTH = 80
COMMAND_TIMEOUT_S = 120
MARKER = re.compile(r"<!-- transcript(?:: (first|last) (\d+) lines)? -->")
PROMPT = "$ "


class TranscriptError(Exception):
    """A marker, a block or the collector that stops the transcripts being written: the
    message names the file and line, or what the collector said."""


@dataclass(frozen=True)
class Block:
    """One transcript: where it is, its commands and how much of their output it keeps."""

    page: Path
    marker_line: int  # 1-based, as an editor shows it
    body: slice  # the lines between the fences, as indexes into the page's lines
    commands: tuple[str, ...]
    cut: tuple[str, int] | None  # ("first" or "last", lines kept)

    def name(self) -> str:
        """`README.md:12` and its first command, as the messages name a block."""
        return f"{shown(self.page)}:{self.marker_line} ({PROMPT}{self.commands[0]})"


def shown(page: Path) -> str:
    """`page` as the messages name it: relative to the checkout where it is inside."""
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def find_blocks(page: Path, lines: Sequence[str]) -> list[Block]:
    """The transcripts of `page`, whose text is `lines`."""
    blocks = []
    for index, line in enumerate(lines):
        marker = MARKER.fullmatch(line.strip())
        if marker is None:
            continue
        where = f"{shown(page)} line {index + 1}"
        if index + 1 >= len(lines) or not lines[index + 1].startswith("```"):
            raise TranscriptError(f"{where}: a transcript marker is followed by a fenced "
                                  "block (```text) on the next line")
        start = index + 2
        end = next((n for n in range(start, len(lines)) if lines[n].startswith("```")), None)
        if end is None:
            raise TranscriptError(f"{where}: the transcript's block is never closed (```)")
        commands = tuple(text[len(PROMPT):].strip() for text in lines[start:end]
                         if text.startswith(PROMPT))
        if not commands:
            raise TranscriptError(f"{where}: the transcript's block has no command line "
                                  f"(one that starts with {PROMPT!r})")
        cut = (marker[1], int(marker[2])) if marker[1] else None
        blocks.append(Block(page, index + 1, slice(start, end), commands, cut))
    return blocks


def load_reference_runs(db: Path) -> None:
    """Store the reference runs in the new database `db`, validated as `gpubench-collector
    import` validates them, each received at its record's created_at."""
    from gpubench import record
    from gpubench.collector import validation
    from gpubench.collector.rows import run_row
    from gpubench.collector.store import Store

    rows = []
    for path in sorted(REFERENCE_RUNS.glob("*.json")):
        run = record.from_json(path.read_text(), source=str(path))
        try:
            validation.validate(run, may_publish=True)
        except validation.InvalidRun as exc:
            raise TranscriptError(f"{path.relative_to(ROOT)}: {exc}") from exc
        row = run_row(run, SUBMITTER)
        if row["created_at"] is None:
            raise TranscriptError(f"{path.relative_to(ROOT)}: the record has no created_at, "
                                  "which the transcripts take as the time it was received")
        row["received_at"] = row["created_at"]
        rows.append(row)
    store = Store(db)
    try:
        refused = [str(r) for r in store.store_rows(rows) if isinstance(r, Exception)]
    finally:
        store.close()
    if refused:
        raise TranscriptError("the reference runs were refused: " + "; ".join(refused))


@contextmanager
def reference_collector(folder: Path) -> Iterator[str]:
    """A collector serving the reference runs from a DuckDB file in `folder`; its address
    while the block runs, then stopped with SIGTERM as a service manager would."""
    db = folder / "collector.duckdb"
    load_reference_runs(db)
    log = folder / "collector.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(BIN / "gpubench-collector"), "serve", "--db", str(db), "--port", "0",
             "--public-read"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield _address(server, log)
    finally:
        stop(server)


def _address(server: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> str:
    """The address the collector says it serves on (its first line)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        said = log.read_text(errors="replace")
        found = re.search(r"serving on (\S+:\d+)", said)
        if found:
            return found[1]
        if server.poll() is not None:
            raise TranscriptError(f"the collector exited ({server.returncode}) before "
                                  f"serving:\n{said.strip()}")
        time.sleep(0.1)
    raise TranscriptError(f"the collector did not say its address in {timeout_s:.0f} s")


def run_command(command: str, address: str, folder: Path) -> tuple[str, int]:
    """What `command` prints (stdout and stderr, as a terminal shows them) in `folder`,
    and its exit code."""
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(folder),
           "GPUBENCH_COLLECTOR": address, "COLUMNS": str(WIDTH),
           # The order of stdout and stderr as written; UTF-8 whatever the locale.
           "PYTHONUNBUFFERED": "1", "PYTHONUTF8": "1", "PYTHONIOENCODING": "utf-8"}
    try:
        done = subprocess.run(["bash", "-c", command], cwd=folder, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TranscriptError(f"{PROMPT}{command}: no answer in {COMMAND_TIMEOUT_S} s") from None
    # A free port has 5 digits, as 50051 has: lines wrap alike.
    said = done.stdout.decode("utf-8", errors="replace").replace(address, SHOWN_ADDRESS)
    return said, done.returncode


def transcript(block: Block, address: str, notes: list[str]) -> list[str]:
    """The block's lines as its commands print them now; a command that exits non-zero
    is noted in `notes` (a refusal may be what the page shows)."""
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpubench-transcript-") as folder:
        for command in block.commands:
            if lines and not lines[-1].startswith(PROMPT):
                lines.append("")  # a blank line after the previous command's output
            said, code = run_command(command, address, Path(folder))
            if code:
                notes.append(f"{shown(block.page)}:{block.marker_line}: {PROMPT}{command}: "
                             f"exit code {code}")
            output = [line.rstrip() for line in said.rstrip().splitlines()]
            lines += [f"{PROMPT}{command}", *_cut(output, block.cut)]
    return lines


def _cut(output: list[str], cut: tuple[str, int] | None) -> list[str]:
    """`output` as much of it as the marker keeps, and a line saying what was left out."""
    if cut is None or len(output) <= cut[1]:
        return output
    which, kept = cut
    left_out = len(output) - kept
    if which == "first":
        return [*output[:kept], f"[... {left_out} more {_lines(left_out)}]"]
    return [f"[... {left_out} {_lines(left_out)} before]", *output[-kept:]]


def _lines(count: int) -> str:
    return "line" if count == 1 else "lines"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="write the command transcripts of README.md and docs/*.md")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each transcript that differs")
    parser.add_argument("pages", nargs="*", type=Path, metavar="PAGE",
                        help="only these Markdown files (default: README.md, docs/*.md)")
    args = parser.parse_args(argv)
    try:
        return _write_or_check([p.resolve() for p in args.pages] or list(PAGES), args.check)
    except TranscriptError as exc:
        print(f"transcripts: error: {exc}", file=sys.stderr)
        return 2


def _write_or_check(pages: list[Path], check: bool) -> int:
    missing = [shown(page) for page in pages if not page.is_file()]
    if missing:
        raise TranscriptError(f"no such file: {', '.join(missing)}")
    texts = {page: page.read_text().splitlines() for page in pages}
    blocks = {page: find_blocks(page, lines) for page, lines in texts.items()}
    if not any(blocks.values()):
        print("no transcripts in " + ", ".join(map(shown, pages)))
        return 0
    stale = 0
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpubench-transcripts-") as folder, \
            reference_collector(Path(folder)) as address:
        for page, lines in texts.items():
            changed = []
            for block in blocks[page]:
                old, made = lines[block.body], transcript(block, address, notes)
                if made == old:
                    continue
                stale += 1
                changed.append((block, made))
                if check:
                    print(f"{block.name()} differs from what its commands print now:")
                    for line in difflib.unified_diff(old, made, "in the page", "printed now",
                                                     lineterm="", n=2):
                        print(line)
            if changed and not check:
                new = list(lines)
                for block, made in reversed(changed):  # from the end: the indexes stay true
                    new[block.body] = made
                page.write_text("\n".join(new) + "\n")
                print(f"wrote {shown(page)} ({len(changed)} transcript(s) changed)")
    if check and stale:
        print(f"{stale} transcript(s) out of date: run {REGENERATE}", file=sys.stderr)
        return 1
    if not check:
        for note in notes:
            print(note, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
