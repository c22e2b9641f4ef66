"""A run record as bytes on the wire: its size budget, and fields the schema lacks.

The collector stores a run as it was serialised and lists runs in pages, so a run's
bytes are paid for on every read; both checks below bound what one submission can
make every later reader carry.
"""

from __future__ import annotations

from google.protobuf import unknown_fields
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

# The most bytes a run record may have, serialised. Chosen from the real records: the 36
# in docs/results (runs/*.json, h200-default-run/*.json and the rest) are 530 to 1,258
# bytes (a run of 2 epochs; each further epoch adds about 135 bytes). A run of the most
# epochs the collector accepts (1,000: about 136 KB) with its batch trials and warnings
# fits; every list of the record at its longest at once (about 265 KB) does not. 256 KiB
# is 200 times the largest real record, and a ListRuns page (PAGE_BYTES in
# collector.service) holds at least eight such runs.
MAX_RUN_BYTES = 256 * 1024


def size_problem(run: Message) -> str:
    """What is wrong with the size of `run` ("" when it is within MAX_RUN_BYTES)."""
    size = run.ByteSize()
    if size <= MAX_RUN_BYTES:
        return ""
    return (f"{size:,} bytes serialised, more than the {MAX_RUN_BYTES:,} a run may have "
            f"(a real run is a few KB)")


def unknown_field_problems(message: Message, at: str) -> list[tuple[str, str]]:
    """(path, problem) for each message in `message` (path `at`) that holds fields its
    type does not have: bytes a client added that no reader of the schema can see."""
    # A copy without them is as long when there are none: a few microseconds, where
    # walking every message costs tens.
    bare = type(message)()
    bare.CopyFrom(message)
    bare.DiscardUnknownFields()
    if bare.ByteSize() == message.ByteSize():
        return []
    return _unknown_fields(message, at)


def _unknown_fields(message: Message, at: str) -> list[tuple[str, str]]:
    found = []
    numbers = sorted({f.field_number for f in unknown_fields.UnknownFieldSet(message)})
    if numbers:
        listed = ", ".join(str(n) for n in numbers[:5])
        found.append((at, f"unknown field{'s' if len(numbers) > 1 else ''} {listed} (not in "
                          f"{message.DESCRIPTOR.full_name}; is the sender's schema newer?)"))
    for descriptor, value in message.ListFields():
        if descriptor.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if _is_repeated(descriptor):
            for i, item in enumerate(value):
                found += _unknown_fields(item, f"{at}.{descriptor.name}[{i}]")
        else:
            found += _unknown_fields(value, f"{at}.{descriptor.name}")
    return found


def _is_repeated(descriptor: FieldDescriptor) -> bool:
    # `label` is gone from newer protobuf releases, `is_repeated` new in them.
    if hasattr(descriptor, "is_repeated"):
        return bool(descriptor.is_repeated)
    return descriptor.label == FieldDescriptor.LABEL_REPEATED
