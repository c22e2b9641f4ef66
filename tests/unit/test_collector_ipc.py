"""collector.ipc: a runs-table row, a status, an acknowledgement, as protobuf and back.

The wire between a multi-process collector's owner and its front-ends carries no
pickles: each value goes as a field of a message of collector_ipc.proto, and comes
back as the same Python value of the same type.
"""

from __future__ import annotations

import ast
from datetime import datetime
from pathlib import Path

import grpc
import pytest
from factories import make_run

from gpubench import comparison_key
from gpubench.collector import ipc
from gpubench.collector.rows import Ack, run_row
from gpubench.collector.transport import Refusal
from gpubench.v1 import collector_ipc_pb2 as ipc_pb2

ROOT = Path(__file__).resolve().parents[2]
LIMIT = ipc.frame_limit(1 << 20)


def _through_the_wire(message) -> ipc_pb2.FrontendMessage:
    frame = ipc.framed(message, LIMIT)
    (data,) = ipc.Frames(LIMIT).feed(frame)
    return ipc.parse(ipc_pb2.FrontendMessage, data)


@pytest.mark.parametrize("run", [
    make_run(),
    make_run(gpu_name="NVIDIA H200", gpu_count=8, model="B7", precision="mixed_bfloat16",
             label="lab ✓ 実験"),
    # A failed run: the figures' columns are NULL.
    make_run(status="out_of_memory"),
    make_run(energy_per_epoch_joules=0.0, created_at=datetime(2026, 3, 1, 12, 0, 0, 999999)),
    make_run(published=True, source="a paper"),
], ids=["t4", "h200x8", "failed", "no-energy", "published"])
def test_a_row_comes_back_as_run_row_made_it(run) -> None:
    row = run_row(run, "")
    message = _through_the_wire(ipc.submit_request("Bearer x", "ipv4:127.0.0.1:5", row, []))
    back, problems = ipc.submission_of(message.submit)
    assert problems == []
    assert back == row
    assert {k: type(v) for k, v in back.items()} == {k: type(v) for k, v in row.items()}
    assert ipc.caller_of(message.submit) == ("Bearer x", "ipv4:127.0.0.1:5")


def test_a_failed_runs_null_columns_stay_null() -> None:
    row = run_row(make_run(status="error"), "")
    nulls = {k for k, v in row.items() if v is None}
    assert {"received_at", "epoch2_seconds", "train_images_per_second"} <= nulls
    back, _ = ipc.submission_of(_through_the_wire(
        ipc.submit_request(None, None, row, [])).submit)
    assert {k for k, v in back.items() if v is None} == nulls


def test_every_column_of_run_row_has_its_field() -> None:
    """A column added to run_row without a RunRow field fails loudly, not silently."""
    row = run_row(make_run(), "")
    # The comparison key's dimensions without a field travel in the maps.
    maps = {"key_texts", "key_counts"}
    fields = {f.name for f in ipc_pb2.RunRow.DESCRIPTOR.fields} - maps
    assert set(row) == fields | (set(comparison_key.NAMES) - fields)
    with pytest.raises(AttributeError):
        ipc.fill_row(ipc_pb2.RunRow(), {**row, "new_column": 1})


def test_an_invalid_run_goes_as_its_problems_without_a_row() -> None:
    problems = [("run.config.batch_per_gpu", "must be >= 1, got 0"), ("run.run_id", "missing")]
    message = _through_the_wire(ipc.submit_request(None, "ipv6:[::1]:9", None, problems))
    assert ipc.submission_of(message.submit) == (None, problems)
    assert ipc.caller_of(message.submit) == (None, "ipv6:[::1]:9")


def test_an_empty_authorization_is_not_a_missing_one() -> None:
    message = _through_the_wire(ipc.auth_request("", None))
    assert ipc.caller_of(message.auth) == ("", None)


def test_replies_come_back_as_their_outcomes() -> None:
    def reply(frame: bytes) -> ipc_pb2.Reply:
        (data,) = ipc.Frames(LIMIT).feed(frame)
        return ipc.parse(ipc_pb2.OwnerMessage, data).reply

    assert ipc.outcome(reply(ipc.accepted(LIMIT))) is None
    assert ipc.outcome(reply(ipc.response(b"\x00\x01bytes", LIMIT))) == b"\x00\x01bytes"
    ack = Ack("run-1", datetime(2026, 12, 1, 5, 6, 7, 123456), "ab" * 32)
    answer = ipc.outcome(reply(ipc.acknowledged(ack, LIMIT)))
    assert (answer.run_id, answer.received_at.ToDatetime(), answer.content_sha256) == (
        "run-1", ack.received_at, "ab" * 32)
    for code in grpc.StatusCode:
        with pytest.raises(Refusal) as caught:
            ipc.outcome(reply(ipc.refused(code, f"why {code.name} ✓", LIMIT)))
        assert (caught.value.code, caught.value.details) == (code, f"why {code.name} ✓")


def test_a_status_message_protobuf_cannot_carry_is_replaced_not_lost() -> None:
    (data,) = ipc.Frames(LIMIT).feed(
        ipc.refused(grpc.StatusCode.INTERNAL, "bad \udc80 text", LIMIT))
    with pytest.raises(Refusal) as caught:
        ipc.outcome(ipc.parse(ipc_pb2.OwnerMessage, data).reply)
    assert caught.value.details == "bad ? text"


def test_a_response_too_large_for_a_frame_is_refused_as_grpc_refuses_it() -> None:
    small = 1024 + ipc.FRAME_SLACK  # a frame limit with room for 1024 bytes of response
    (data,) = ipc.Frames(small).feed(ipc.response(b"x" * 1025, small))
    with pytest.raises(Refusal) as caught:
        ipc.outcome(ipc.parse(ipc_pb2.OwnerMessage, data).reply)
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max (1025 vs. 1024)" in caught.value.details


def test_frames_split_however_the_reads_cut_them() -> None:
    messages = [ipc.auth_request(f"Bearer {i}", None) for i in range(3)]
    stream = b"".join(ipc.framed(m, LIMIT) for m in messages)
    for cut in (1, 2, 3, 5, 7, len(stream)):
        frames = ipc.Frames(LIMIT)
        found = []
        for at in range(0, len(stream), cut):
            found += frames.feed(stream[at:at + cut])
        assert [ipc.parse(ipc_pb2.FrontendMessage, f) for f in found] == messages


def test_a_frame_over_the_limit_is_refused_from_its_length_alone() -> None:
    frames = ipc.Frames(1000)
    with pytest.raises(ipc.FrameError, match="1,001 bytes announced; at most 1,000"):
        frames.feed((1001).to_bytes(4, "big"))  # no body needed to refuse it
    with pytest.raises(ipc.FrameError, match="over the 10 a frame may have"):
        ipc.framed(ipc.auth_request("Bearer a long token", None), 10)


def test_the_limit_covers_the_largest_request_and_response() -> None:
    assert ipc.frame_limit(1 << 20) == (64 << 20) + ipc.FRAME_SLACK
    assert ipc.frame_limit(100 << 20) == (100 << 20) + ipc.FRAME_SLACK


@pytest.mark.parametrize("data", [b"\xff\xff\xff", b"", ipc_pb2.Proof(mac=b"x").SerializeToString()
                                  + b"\x0b"], ids=["garbage", "empty", "truncated"])
def test_bytes_that_are_no_message_are_a_broken_peer(data: bytes) -> None:
    with pytest.raises(ipc.FrameError):
        ipc.parse(ipc_pb2.FrontendMessage, data)


def test_a_proof_holds_only_for_its_secret_and_nonce() -> None:
    secret, other = ipc.new_secret(), ipc.new_secret()
    nonce, challenge = ipc.challenge()
    (data,) = ipc.Frames(ipc.HANDSHAKE_LIMIT).feed(challenge)
    assert ipc.nonce_of(ipc.parse(ipc_pb2.OwnerMessage, data)) == nonce
    assert ipc.proves(ipc.proof(secret, nonce), secret, nonce)
    assert not ipc.proves(ipc.proof(other, nonce), secret, nonce)
    assert not ipc.proves(ipc.proof(secret, ipc.challenge()[0]), secret, nonce)
    assert not ipc.proves(ipc.auth_request("Bearer x", None), secret, nonce)
    assert len(ipc.proof(secret, nonce).SerializeToString()) < ipc.HANDSHAKE_LIMIT


def test_the_ipc_path_has_no_pickle_or_eval() -> None:
    """Beside the tests above and the integration tests of the owner's socket: the
    modules of the IPC path import nothing that unpickles and evaluate nothing."""
    banned = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle",
              "multiprocessing"}
    for name in ("ipc.py", "owner.py", "frontend.py"):
        tree = ast.parse((ROOT / "collector" / "gpubench" / "collector" / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported = {(node.module or "").split(".")[0]}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("eval", "exec"), f"{name}: {node.func.id}()"
                continue
            else:
                continue
            assert not imported & banned, f"{name} imports {imported & banned}"
