#!/usr/bin/env python3
"""A newcomer's first hour, for real: README's two commands in a clean Debian container.

    bench/first_hour.py [--out /tmp/firsthour] [--steps demo,demo,test]

As root on a machine with docker (docker/engine.sh starts it, docker/base-image.sh makes
the bookworm base image with python3, python3-venv and python3-pip), this

  1. makes the image: the base image plus make and git (apt-get install
     --no-install-recommends), nothing else, tagged gpubench-firsthour:<base tag>;
  2. starts a container of it (8 GiB of memory, every core), puts `git archive HEAD`
     of this checkout in /root/gpubench (a tarball: no .git), and records what the
     system holds (dpkg -l, the enabled services, a stamp file);
  3. runs each step (`make demo`, `make demo`, `make test` by default) as root in an
     80x50 terminal (a pseudo-terminal of that size; `stty cols 80 rows 50` inside),
     under bash's `time`, pressing Enter where the demo waits for it;
  4. records the system again and checks: each step's exit status and time, every
     output line within 80 columns (a line with no space in it is tolerated), the
     services before and after, the packages before and after, and the files new or
     changed under /usr, /etc, /opt and /var/lib (ctime newer than the stamp: dpkg keeps
     a package's own mtimes) that no package owns.

Everything goes to --out: each step's terminal output as typed (STEP.raw) and as text
(STEP.txt), before/ and after/ (with the sizes of .venv and .tools and what changed in
root's home), pip's install.log, and summary.txt, which is also printed. Exit 0 when every
step exited 0 and every check held, 1 otherwise.

Where pip needs a CA bundle of this machine's to reach PyPI (PIP_CERT set here), the
container gets it read-only at /run/host-ca.pem with PIP_CERT naming it: nothing in the
container's own /etc changes for it.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

DOCKER = "/usr/bin/docker"
ROOT = Path(__file__).resolve().parent.parent
PROJECT = "/root/gpubench"
STAMP = "/root/.first-hour-stamp"
WIDTH, HEIGHT = 80, 50
ENTER_PROMPT = b"Enter stops the site"
VENV_READY = b".venv is ready"  # the Makefile's last set-up line
SCOPE = "/usr /etc /opt /var/lib"
# What the package manager's own state and caches change: not an installation.
NOT_INSTALLS = ("/var/lib/apt/lists/", "/var/lib/dpkg/", "/var/cache/", "/var/lib/apt/")
# What docker itself writes into every container (its bind mounts).
DOCKERS_OWN = ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf")
ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


def sh(*args: str, check: bool = True, **kw) -> str:
    """Run a command here; its stdout as text."""
    done = subprocess.run(args, check=check, text=True, stdout=subprocess.PIPE, **kw)
    return done.stdout


def in_container(name: str, script: str) -> str:
    """Run a bash script in the container, no terminal; its stdout."""
    return sh(DOCKER, "exec", name, "bash", "-c", script)


def make_image() -> str:
    """The base image (docker/base-image.sh) plus make and git; its name."""
    base = sh("bash", str(ROOT / "docker/base-image.sh")).strip()
    image = "gpubench-firsthour:" + base.split(":", 1)[1] + "-make-git"
    if subprocess.run([DOCKER, "image", "inspect", image], capture_output=True).returncode:
        name = f"gpubench-firsthour-image-{os.getpid()}"
        sh(DOCKER, "run", "--name", name, base, "bash", "-c",
           "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
           "--no-install-recommends make git >/dev/null && rm -rf /var/lib/apt/lists/*")
        sh(DOCKER, "commit", "-m", "+ apt-get install --no-install-recommends make git",
           name, image)
        sh(DOCKER, "rm", name)
    return image


def snapshot(name: str, folder: Path) -> None:
    """What the container's system holds: packages, services, and (after) changed files."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dpkg.txt").write_text(in_container(
        name, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' | sort"))
    (folder / "services.txt").write_text(in_container(name, (
        "for d in /etc/systemd/system/*.wants /etc/rc?.d; do echo \"== $d\"; "
        "ls -1 \"$d\" 2>/dev/null; done; "
        "if command -v systemctl >/dev/null; then echo '== systemctl enabled'; "
        "systemctl list-unit-files --state=enabled --no-pager 2>&1; "
        "else echo '== no systemctl'; fi")))
    (folder / "changed.txt").write_text(in_container(name, (
        f"[ -e {STAMP} ] && find {SCOPE} -xdev -cnewer {STAMP} -not -type d "
        "-not -path '/var/lib/apt/lists/*' | sort || true")))
    (folder / "owned.txt").write_text(in_container(
        name, "cat /var/lib/dpkg/info/*.list | sort -u"))


def run_in_terminal(name: str, command: str, raw: Path) -> tuple[int, float, float | None]:
    """`command` in the project's folder, in an 80x50 pseudo-terminal; (status, seconds,
    seconds until it said the virtual environment is ready, if it did)."""
    # nice: the machine is shared; it changes no output.
    inner = f"stty cols {WIDTH} rows {HEIGHT}; cd {PROJECT} && time nice {command}"
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(DOCKER, [DOCKER, "exec", "-it", name, "bash", "-c", inner])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", HEIGHT, WIDTH, 0, 0))
    start, pressed, seen, ready_at = time.monotonic(), False, b"", None
    with raw.open("wb") as out:
        while True:
            ready, _, _ = select.select([fd], [], [], 5)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not chunk:
                break
            out.write(chunk)
            out.flush()
            seen = (seen + chunk)[-4096:]
            if ready_at is None and VENV_READY in seen:
                ready_at = time.monotonic() - start
            if not pressed and ENTER_PROMPT in seen:
                time.sleep(1)
                os.write(fd, b"\r")
                pressed = True
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), time.monotonic() - start, ready_at


def as_text(raw: bytes) -> list[str]:
    """The lines a terminal shows: escapes removed, each carriage-return segment a line."""
    text = ANSI.sub(b"", raw).decode("utf-8", "replace").replace("\r\n", "\n")
    lines = []
    for line in text.split("\n"):
        segments = [s.expandtabs(8) for s in line.split("\r")]
        lines.append(max(segments, key=len) if segments else "")
    return lines


def too_wide(lines: list[str]) -> list[tuple[int, str]]:
    """Lines past 80 columns, but for one unbreakable word (no space in it)."""
    return [(number, line) for number, line in enumerate(lines, 1)
            if len(line) > WIDTH and " " in line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/firsthour"),
                        help="folder for the outputs (default /tmp/firsthour)")
    parser.add_argument("--steps", default="make demo,make demo,make test",
                        help="commands run in turn, comma-separated "
                             "(default: make demo,make demo,make test)")
    parser.add_argument("--memory", default="8g", help="the container's memory (default 8g)")
    parser.add_argument("--keep", action="store_true", help="leave the container running")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    sh("bash", str(ROOT / "docker/engine.sh"))
    image = make_image()
    commit = sh("git", "-C", str(ROOT), "rev-parse", "HEAD").strip()
    tree = out / "tree.tar"
    sh("git", "-C", str(ROOT), "archive", "-o", str(tree), "HEAD")
    name = f"gpubench-firsthour-{os.getpid()}"
    certs = []
    if os.environ.get("PIP_CERT"):
        certs = ["-v", f"{os.environ['PIP_CERT']}:/run/host-ca.pem:ro",
                 "-e", "PIP_CERT=/run/host-ca.pem"]
    sh(DOCKER, "run", "-d", "--name", name, "--memory", args.memory, *certs,
       image, "sleep", "infinity")
    summary = [f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
               f"commit: {commit} (git archive HEAD, {tree.stat().st_size} bytes)",
               f"image: {image} ({sh(DOCKER, 'image', 'inspect', '-f', '{{.Id}}', image)[:19]})",
               f"container: {name}, --memory {args.memory}, every core "
               f"({in_container(name, 'nproc').strip()}), root, {WIDTH}x{HEIGHT} terminal"]
    try:
        in_container(name, f"mkdir -p {PROJECT}")
        sh(DOCKER, "cp", str(tree), f"{name}:/root/tree.tar")
        in_container(name, f"tar -xf /root/tree.tar -C {PROJECT} && rm /root/tree.tar")
        snapshot(name, out / "before")
        in_container(name, f"touch {STAMP}")
        ok = True
        for number, command in enumerate(args.steps.split(","), 1):
            label = f"{number}-{command.replace(' ', '-')}"
            status, seconds, ready_at = run_in_terminal(name, command, out / f"{label}.raw")
            lines = as_text((out / f"{label}.raw").read_bytes())
            (out / f"{label}.txt").write_text("\n".join(lines))
            wide = too_wide(lines)
            ok = ok and status == 0 and not wide
            summary.append(f"{label}: exit {status}, {seconds:.0f} s, {len(lines)} lines, "
                           f"{len(wide)} past {WIDTH} columns")
            if ready_at is not None:
                summary.append(f"  .venv set up in {ready_at:.0f} s (its 'is ready' line)")
            summary += [f"  line {n} ({len(text)} columns): {text}" for n, text in wide]
            summary += [f"  tolerated, one word: line {n} ({len(text)} columns): {text}"
                        for n, text in enumerate(lines, 1)
                        if len(text) > WIDTH and " " not in text.strip()]
            summary += ["  " + line for line in lines if re.match(r"^(real|user|sys)\s", line)]
        snapshot(name, out / "after")
        subprocess.run([DOCKER, "cp", f"{name}:{PROJECT}/.venv/install.log", str(out)],
                       capture_output=True)
        (out / "after" / "sizes.txt").write_text(in_container(name, (
            f"cd {PROJECT} && du -sh .venv .tools .demo 2>/dev/null; "
            ".venv/bin/pip freeze 2>/dev/null | grep -i -E '^(torch|tensorflow|nvidia)'; "
            # What the steps left in root's home outside the project (pip's cache, say).
            f"find /root -xdev -mindepth 1 -maxdepth 3 -cnewer {STAMP} "
            f"-not -path '{PROJECT}*' | sort")))
    finally:
        if not args.keep:
            subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)
    summary += compare(out / "before", out / "after")
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    return 0 if ok else 1


def compare(before: Path, after: Path) -> list[str]:
    """Services, packages and unowned files, before and after."""
    said = []
    services = [(before / "services.txt").read_text(), (after / "services.txt").read_text()]
    said.append("services: " + ("unchanged" if services[0] == services[1] else "CHANGED"))
    if services[0] != services[1]:
        old = set(services[0].splitlines())
        said += [f"  + {line}" for line in services[1].splitlines() if line not in old]
    packages = [{line.split()[0]: line.split()[1:] for line in
                 (f / "dpkg.txt").read_text().splitlines()} for f in (before, after)]
    added = sorted(set(packages[1]) - set(packages[0]))
    gone = sorted(set(packages[0]) - set(packages[1]))
    changed = sorted(p for p in set(packages[0]) & set(packages[1])
                     if packages[0][p] != packages[1][p])
    said.append(f"packages: {len(packages[0])} before, {len(packages[1])} after: "
                f"{len(added)} added, {len(gone)} removed, {len(changed)} changed")
    said.append("  added: " + " ".join(added))
    if gone or changed:
        said.append("  removed: " + " ".join(gone) + "; changed: " + " ".join(changed))
    owned = {merged_usr(path) for path in (after / "owned.txt").read_text().splitlines()}
    files = (after / "changed.txt").read_text().splitlines()
    unowned = [f for f in files if f not in owned and not f.startswith(NOT_INSTALLS)
               and f not in DOCKERS_OWN]
    (after / "unowned.txt").write_text("".join(f"{f}\n" for f in unowned))
    said.append(f"files new or changed under {SCOPE}: {len(files)}; "
                f"owned by no package (apt/dpkg state aside): {len(unowned)}, by folder "
                "(after/unowned.txt lists them):")
    folders: dict[str, int] = {}
    for path in unowned:
        folder = "/".join(path.split("/")[:4 if path.startswith("/usr/") else 3])
        folders[folder] = folders.get(folder, 0) + 1
    said += [f"  {count:5d} {folder}" for folder, count in
             sorted(folders.items(), key=lambda item: (-item[1], item[0]))]
    return said


def merged_usr(path: str) -> str:
    """A path as dpkg lists it (/lib/systemd/...) where bookworm keeps it (/usr/lib/...)."""
    for old in ("/bin/", "/sbin/", "/lib/", "/lib32/", "/lib64/", "/libx32/"):
        if path.startswith(old):
            return "/usr" + path
    return path


if __name__ == "__main__":
    sys.exit(main())
