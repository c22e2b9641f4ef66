"""The command transcripts of README.md and docs/*.md are what the commands print now:
scripts/transcripts.py run as `make lint` runs it, against its real collector (gRPC on
port 0, a DuckDB file of the reference runs); and on a page of the test's own, a stale
transcript is named with its difference, then rewritten."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "transcripts.py"


def _transcripts(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


def test_the_pages_transcripts_are_what_the_commands_print() -> None:
    done = _transcripts("--check")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]


def test_a_stale_transcript_is_named_with_its_difference_then_rewritten(tmp_path: Path
                                                                         ) -> None:
    page = tmp_path / "page.md"
    stale = ("# A page\n\n"
             "<!-- transcript -->\n"
             "```text\n"
             "$ gpubench leaderboard --model B0\n"
             "B0 leaderboard as it was once\n"
             "```\n\n"
             "<!-- transcript: first 5 lines -->\n"
             "```console\n"
             "$ printf 'one\\ntwo\\nthree  \\nfour\\n' > lines.txt\n"
             "$ cat lines.txt; echo \"at $GPUBENCH_COLLECTOR\" >&2; seq 3\n"
             "```\n")
    page.write_text(stale)

    checked = _transcripts("--check", str(page))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"{page}:3 ($ gpubench leaderboard --model B0) differs" in checked.stdout
    assert "-B0 leaderboard as it was once" in checked.stdout
    assert "+B0 leaderboard · settings kernels+cuda-graphs · batch steps" in checked.stdout
    assert f"{page}:9 ($ printf" in checked.stdout
    assert "2 transcript(s) out of date: run python scripts/transcripts.py" in checked.stderr
    assert page.read_text() == stale, "--check wrote the page"

    written = _transcripts(str(page))
    assert written.returncode == 0, written.stdout + written.stderr
    text = page.read_text()
    # The reference runs' H200 leads the board, its legend under it.
    assert "1 1x NVIDIA" in text and "ranked by the median epoch-2 time" in text
    assert "as it was once" not in text
    # Both commands of the block; the second's output cut to its first five lines, its
    # stderr in order, the collector's address as the page shows it, no trailing space.
    assert text.endswith("```console\n"
                         "$ printf 'one\\ntwo\\nthree  \\nfour\\n' > lines.txt\n"
                         "$ cat lines.txt; echo \"at $GPUBENCH_COLLECTOR\" >&2; seq 3\n"
                         "one\ntwo\nthree\nfour\nat 127.0.0.1:50051\n"
                         "[... 3 more lines]\n"
                         "```\n")
    assert _transcripts("--check", str(page)).returncode == 0


def test_a_marker_without_its_block_is_named(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- transcript -->\n\n```text\n$ gpubench --version\n```\n")
    done = _transcripts("--check", str(page))
    assert done.returncode == 2
    assert f"{page} line 1: a transcript marker is followed by a fenced block" in done.stderr
