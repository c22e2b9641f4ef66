"""Will the decoded images fit in host memory? (the cached pipeline asks before decoding)"""

from __future__ import annotations

import os

# Share of the available memory the decoded cache may take; the rest is left to
# the framework, which needs several GiB of host memory of its own.
CACHE_SHARE_OF_AVAILABLE = 0.5


def available_memory_bytes() -> int:
    """Memory the system could give this process now (MemAvailable), in bytes."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def cache_bytes(image_count: int, size: int) -> int:
    """Bytes the decoded uint8 cache takes: images x height x width x 3."""
    return image_count * size * size * 3


def cache_refusal(image_count: int, size: int, available: int) -> str | None:
    """Why the images should be streamed rather than cached (a warning), or None if they fit."""
    need = cache_bytes(image_count, size)
    if need <= CACHE_SHARE_OF_AVAILABLE * available:
        return None
    return (f"decoded images would take {need / 2**30:.1f} GiB of the {available / 2**30:.1f} "
            "GiB available: streaming them from disk every epoch instead of caching")
