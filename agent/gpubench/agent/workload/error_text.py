"""What a framework's error says: whether memory ran out, and the line that tells it.

The three frameworks (and the C++ allocators under them) say "out of memory" in words
of their own; the batch search, the trials, the CUDA graphs' capture and the run's own
failure all read an error through these two functions. Nothing here imports a framework.
"""

from __future__ import annotations

# Text that the three frameworks (and the C++ allocators under them) put in an
# out-of-memory error; class names are checked too.
_OOM_CLASSES = {"ResourceExhaustedError", "OutOfMemoryError", "MemoryError"}
_OOM_TEXT = (
    "out of memory",
    "resource_exhausted",
    "resource exhausted",
    "oom when allocating",
    "can't allocate memory",
    "failed to allocate",
    "std::bad_alloc",
    "not enough memory",
    # oneDNN (torch's CPU convolutions) reports a failed allocation this way.
    "could not create a primitive",
)


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` (or one it came from) is any backend's out-of-memory error."""
    return out_of_memory_message(error) is not None


def out_of_memory_message(error: BaseException) -> str | None:
    """The line that says memory ran out, from `error` or the errors it came from; else None.

    Keras wraps a layer's failure ("Exception encountered when calling Pad.call()")
    with the allocator's message further down, so the chain and every line are read.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        lines = str(current).strip().splitlines() or [""]
        for line in lines:
            if any(marker in line.lower() for marker in _OOM_TEXT):
                return f"{type(current).__name__}: {line.strip()}"
        if type(current).__name__ in _OOM_CLASSES:
            return f"{type(current).__name__}: {lines[0].strip()}"
        current = current.__cause__ or current.__context__
    return None


def error_line(error: BaseException) -> str:
    """The line of an error that says what went wrong, after its type: the
    out-of-memory line if any, else the message's first line."""
    found = out_of_memory_message(error)
    if found:
        return found
    text = str(error).strip() or type(error).__name__
    return f"{type(error).__name__}: {text.splitlines()[0]}"
