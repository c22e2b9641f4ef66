"""A command run as a person runs it: its stderr a terminal (a pseudo-terminal), its
stdout piped, so that what the commands say only to a person (an old flag's new
spelling) can be read back; or started with Ctrl-C's SIGINT at its default, as from a
terminal (popen_with_ctrl_c)."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

# Colours and cursor moves a terminal gets (rich's), left out of what is read back.
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@dataclass
class OnTerminal:
    """What a command did: its exit code, stdout, and what its terminal showed (white
    space folded, escapes left out)."""

    returncode: int
    stdout: str
    terminal: str


def on_a_terminal(argv: list[str], env: dict[str, str], timeout: float = 120) -> OnTerminal:
    """Run `argv` with stderr on a pseudo-terminal and stdout piped."""
    main, child = pty.openpty()
    shown: list[bytes] = []

    def read() -> None:  # as it comes: a full terminal would stop the command
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:  # the command's side is closed: all is read
                return
            if not data:
                return
            shown.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=child, env=env, text=True, timeout=timeout, check=False)
    finally:
        os.close(child)
    reader.join(timeout=10)
    os.close(main)
    text = _ESCAPES.sub("", b"".join(shown).decode(errors="replace"))
    return OnTerminal(done.returncode, done.stdout, " ".join(text.split()))


def popen_with_ctrl_c(argv: list[str], **options: Any) -> subprocess.Popen:
    """subprocess.Popen(argv, **options) with SIGINT at its default, as in a terminal,
    whatever this test process inherited or an earlier test left: a runner in the
    background starts tests with SIGINT ignored, and an ignored signal stays ignored
    across exec where a handler is reset to the default. Not through preexec_fn: that
    forks this process, which may run gRPC, with gRPC's fork handlers, and the child can
    die in them before exec."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(argv, **options)
    finally:
        signal.signal(signal.SIGINT, previous)
