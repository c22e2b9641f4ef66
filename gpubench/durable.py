"""Writes that survive a crash: what the agent's spool and the collector's journal share."""

from __future__ import annotations

import os
from pathlib import Path


def sync_folder(folder: Path) -> None:
    """Make a folder's entries durable (a new file's name, a rename, a removal).

    fsync of a file makes its bytes durable, not its name: after a crash a file
    created or renamed since the folder's last sync may be missing.
    """
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
