"""The fault campaign's fabrication part: a stranger's token against a real collector
process, submitting what once led the leaderboard, each made from the project's real H200
default run scaled consistently (tests/fabrication.py), then a flood of fast runs.

Allowed: each fabricated run refused (INVALID_ARGUMENT) or stored flagged; the default
leaderboard and Compare hold only the honest H200 runs; after the flood the honest median
moved by at most MAX_MOVE and no honest run is an outlier. Anything else is wrong.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import fabrication  # tests/fabrication.py
import grpc
from chaos_support import Collector, Tally, bearer

from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc, run_pb2

# How far the flood may move the honest median (a share of it).
MAX_MOVE = 0.02
# The honest runs: the real one's repeats, a few percent apart, from the operator.
HONEST_FACTORS = (0.98, 0.99, 1.0, 1.01, 1.02)
REAL_GPU = "NVIDIA H200"


def fabrication_part(folder: Path) -> Tally:
    """Submit every fabricated case and the flood; tally what was answered and what the
    default leaderboard and Compare showed, the cases' table in the tally's details."""
    tally = Tally("fabrication")
    collector = Collector(folder / "fabrication.duckdb")
    operator = collector.token("operator", admin=True)
    stranger = collector.token("stranger")
    collector.start()
    channel = grpc.insecure_channel(collector.address)
    stub = collector_pb2_grpc.CollectorStub(channel)
    rows: list[tuple[str, str, str]] = []
    try:
        honest = [fabrication.scaled(f) for f in HONEST_FACTORS]
        for run in honest:
            _submit(stub, run, operator, tally)
        before = _board(stub, operator)
        cases = [*fabrication.cases(), fabrication.Case("three spaces as the name",
                                                        fabrication.blank_named())]
        for case in cases:
            answer, why = _judged(stub, case.run, stranger, operator, tally)
            rows.append((case.name, answer, why))
        board = _board(stub, operator)
        if [(e.gpu_name, e.runs) for e in board.entries] != [(REAL_GPU, len(honest))]:
            tally.wrong += 1
            tally.note = f"the leaderboard after the cases: {_names(board)}"
        compared = stub.Compare(pb.CompareRequest(model="B0"), metadata=bearer(operator),
                                timeout=30)
        if [(g.gpu_name, g.runs) for g in compared.groups] != [(REAL_GPU, len(honest))]:
            tally.wrong += 1
            tally.note = "Compare after the cases: " + ", ".join(
                f"{g.gpu_name} ({g.runs})" for g in compared.groups)
        flood = fabrication.flood()
        for run in flood:
            _submit(stub, run, stranger, tally)
        after = _board(stub, operator)
        m0 = before.entries[0].epoch2_median_seconds
        m1 = after.entries[0].epoch2_median_seconds if after.entries else 0.0
        moved = abs(m1 - m0) / m0
        outliers = sum(_stored(stub, run, operator).outlier for run in honest)
        flagged = sum(_stored(stub, run, operator).flagged for run in flood)
        rows.append((f"flood: {len(flood)} at {fabrication.FLOOD_FACTOR:g}x from one token",
                     f"{flagged} flagged", f"honest median {m0:.3f} -> {m1:.3f} s (moved "
                     f"{moved:.1%}); {outliers} honest run(s) outliers"))
        if moved > MAX_MOVE or outliers or after.entries[0].gpu_name != REAL_GPU:
            tally.wrong += 1
            tally.note = f"the flood moved the median {moved:.1%}, {outliers} outlier(s)"
        leader = after.entries[0]
        tally.note = tally.note or (
            f"{len(cases)} fabricated cases and a flood of {len(flood)}: none leads; the "
            f"default leaderboard's #1 is {leader.gpu_name} ({leader.runs} honest runs, "
            f"{leader.submitters} submitter), median moved {moved:.1%}")
    finally:
        channel.close()
        collector.stop()
    tally.details = cases_table(rows)
    return tally


def _submit(stub: collector_pb2_grpc.CollectorStub, run: run_pb2.Run, token: str,
            tally: Tally) -> str:
    tally.tried += 1
    try:
        stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=bearer(token), timeout=30)
        code = "OK"
    except grpc.RpcError as exc:
        code = exc.code().name
    tally.code(code)
    return code


def _stored(stub: collector_pb2_grpc.CollectorStub, run: run_pb2.Run,
            token: str) -> pb.StoredRun:
    return stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=bearer(token), timeout=30)


def _judged(stub: collector_pb2_grpc.CollectorStub, run: run_pb2.Run, token: str,
            operator: str, tally: Tally) -> tuple[str, str]:
    """Submit one case: ("refused", why) or ("flagged", the first reason); anything
    else (stored unflagged, another code) is wrong."""
    code = _submit(stub, run, token, tally)
    if code == "INVALID_ARGUMENT":
        return "refused", "INVALID_ARGUMENT"
    if code != "OK":
        tally.wrong += 1
        return code, ""
    stored = _stored(stub, run, operator)
    if not stored.flagged:
        tally.wrong += 1
        return "STORED", "unflagged"
    return "flagged", "; ".join(dict.fromkeys(_gist(r) for r in stored.flag_reasons))


# A flag reason's gist for the table: its pattern, and the words it is shown as.
_GISTS = (
    (r"looks like the catalogued (.+?) but", "look-alike of {0}"),
    (r"^unrecognised GPU", "unrecognised GPU name"),
    (r"more than ([\d.]+)x the fastest verified", "over {0}x the verified run"),
    (r"may reach: ([\d.]+)x the", "over {0}x its expectation"),
    (r"on the CPU is more than", "past the CPU cores' FLOP/s"),
    (r"can compute", "past the card's FLOP/s"),
    (r"can write", "past the card's bandwidth"),
    (r"a mean (\S+) W, less than", "energy: a mean {0} W"),
    (r"GiB of memory", "more memory than any card"),
)


def _gist(reason: str) -> str:
    for pattern, words in _GISTS:
        found = re.search(pattern, reason)
        if found:
            return words.format(*found.groups())
    return reason[:40]


def _board(stub: collector_pb2_grpc.CollectorStub, token: str) -> pb.LeaderboardResponse:
    return stub.Leaderboard(pb.LeaderboardRequest(model="B0"), metadata=bearer(token),
                            timeout=30)


def _names(board: pb.LeaderboardResponse) -> str:
    return ", ".join(f"#{e.rank} {e.gpu_name} ({e.runs})" for e in board.entries) or "empty"


def cases_table(rows: list[tuple[str, str, str]]) -> str:
    """The cases, 80 columns: what was submitted, the answer, and why (wrapped)."""
    lines = [f"{'case':<34}{'answer':<12}why", "-" * 80]
    for name, answer, why in rows:
        wrapped = textwrap.wrap(why, 34) or [""]
        lines.append(f"{name[:33]:<34}{answer[:11]:<12}{wrapped[0]}")
        lines += [f"{'':<46}{more}" for more in wrapped[1:]]
    return "\n".join(lines)
