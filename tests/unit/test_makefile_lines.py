"""What `make test` prints while it fetches its Debian tools fits 80 columns: each
`$(call fetch,PACKAGE,WORDS)` of the Makefile, as its `fetch` prints it (the lines of a
fetch and of one that could not fetch, with the longest log path README's set-up gives)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_fetch_lines_fit_80_columns() -> None:
    text = (ROOT / "Makefile").read_text()
    calls = re.findall(r"\$\(call fetch,([^,]+),([^)]+)\)", text)
    assert {package for package, _ in calls} >= {"prometheus", "chromium", "haproxy"}
    log = ".venv/install.log"
    for package, words in calls:
        lines = [f"fetching Debian's {package} into .tools/{package} for {words}",
                 f"could not fetch {package} (see {log}):", f"  {words} will be skipped"]
        assert all(len(line) <= 80 for line in lines), lines
    # The messages above are what `fetch` prints: checked against its own text.
    assert "fetching Debian's $(1) into $(TOOLS)/$(1) for $(2)" in text
    assert 'echo "could not fetch $(1) (see $(LOG)):"; echo "  $(2) will be skipped"' in text
