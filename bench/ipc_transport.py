"""The owner/front-end link's cost per request: length-prefixed protobuf over a Unix
socket (collector.ipc, as the collector speaks it) against gRPC over a Unix socket.

    .venv/bin/python bench/ipc_transport.py [--requests 20000] [--concurrency 16]

Each side answers a submission-sized request (a SubmitRequest of a realistic run, about
1.3 KB) with an acknowledgement-sized reply, as the owner does:
- framed: an owner-like server, one thread reading every connection through `selectors`
  (as collector.owner's hub does), each connection carrying one request at a time, and
  an asyncio client with one connection per concurrent request (as a front-end's links);
- gRPC: a grpc.server (a thread pool, as a single-process collector) with one unary
  method of bytes, on unix:PATH, and a grpc.aio client channel (as a front-end would use).
The server runs in its own process. Prints requests/s and the CPU per request of the
server (the owner's side) and of the client (a front-end's side).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import selectors
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the realistic run records of the test suite

from datetime import datetime  # noqa: E402

from factories import make_run  # noqa: E402

from gpubench.collector import ipc  # noqa: E402
from gpubench.collector.rows import Ack, run_row  # noqa: E402
from gpubench.v1 import collector_ipc_pb2 as ipc_pb2  # noqa: E402

LIMIT = ipc.frame_limit(1 << 20)
METHOD = "/bench.Owner/Ask"


def _reply() -> bytes:
    return ipc.acknowledged(Ack("0" * 36, datetime(2026, 12, 1), "a" * 64), LIMIT)


def _framed_server(path: str, ready, stop) -> None:
    """Read every connection in one selectors loop; parse each request, reply."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(socket.SOMAXCONN)
    listener.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    frames: dict[socket.socket, ipc.Frames] = {}
    ready.set()
    while not stop.is_set():
        for key, _ in selector.select(0.1):
            if key.data is None:
                sock, _ = listener.accept()
                sock.setblocking(True)
                frames[sock] = ipc.Frames(LIMIT)
                selector.register(sock, selectors.EVENT_READ, sock)
                continue
            sock = key.data
            data = sock.recv(ipc.READ_BYTES)
            if not data:
                selector.unregister(sock)
                sock.close()
                continue
            for frame in frames[sock].feed(data):
                message = ipc.parse(ipc_pb2.FrontendMessage, frame)
                ipc.submission_of(message.submit)
                sock.sendall(_reply())


def _grpc_server(path: str, ready, stop) -> None:
    import grpc

    def ask(request: bytes, context) -> bytes:
        message = ipc.parse(ipc_pb2.FrontendMessage, request)
        ipc.submission_of(message.submit)
        return _reply()[ipc.HEADER_BYTES:]

    server = grpc.server(ThreadPoolExecutor(64))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "bench.Owner", {"Ask": grpc.unary_unary_rpc_method_handler(ask)})])
    server.add_insecure_port(f"unix:{path}")
    server.start()
    ready.set()
    stop.wait()
    server.stop(None)


async def _framed_client(path: str, request: bytes, count: int, concurrency: int) -> None:
    links = [await asyncio.open_unix_connection(path) for _ in range(concurrency)]

    async def worker(reader, writer, n: int) -> None:
        for _ in range(n):
            writer.write(request)
            message = await ipc.read(reader, ipc_pb2.OwnerMessage, LIMIT)
            ipc.outcome(message.reply)

    await asyncio.gather(*(worker(r, w, count // concurrency) for r, w in links))
    for _, writer in links:
        writer.close()


async def _grpc_client(path: str, request: bytes, count: int, concurrency: int) -> None:
    import grpc

    async with grpc.aio.insecure_channel(f"unix:{path}") as channel:
        call = channel.unary_unary(METHOD)

        async def worker(n: int) -> None:
            for _ in range(n):
                reply = await call(request)
                ipc.outcome(ipc_pb2.OwnerMessage.FromString(reply).reply)

        await asyncio.gather(*(worker(count // concurrency) for _ in range(concurrency)))


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(kind: str, count: int, concurrency: int) -> tuple[float, float, float]:
    """(requests/s, server CPU ms per request, client CPU ms per request)."""
    folder = tempfile.mkdtemp(prefix="ipc-transport-")
    path = os.path.join(folder, "owner.sock")
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    target = _framed_server if kind == "framed" else _grpc_server
    server = ctx.Process(target=target, args=(path, ready, stop))
    server.start()
    ready.wait(30)
    row = run_row(make_run(), "")
    request = ipc.framed(ipc.submit_request("Bearer x" * 4, "ipv4:127.0.0.1:40000", row, []),
                         LIMIT)
    if kind == "grpc":
        request = request[ipc.HEADER_BYTES:]
    client = _framed_client if kind == "framed" else _grpc_client
    asyncio.run(client(path, request, concurrency * 20, concurrency))  # warm up
    server_before, client_before = _cpu_of(server.pid), time.process_time()
    began = time.perf_counter()
    asyncio.run(client(path, request, count, concurrency))
    took = time.perf_counter() - began
    server_cpu = _cpu_of(server.pid) - server_before
    client_cpu = time.process_time() - client_before
    stop.set()
    server.join(10)
    return count / took, server_cpu / count * 1000, client_cpu / count * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; {args.requests} requests of a submission's size, "
          f"{args.concurrency} at once, {args.rounds} rounds alternated")
    for round_ in range(args.rounds):
        for kind in ("framed", "grpc") if round_ % 2 == 0 else ("grpc", "framed"):
            rate, server_ms, client_ms = measure(kind, args.requests, args.concurrency)
            print(f"  {kind:6s}: {rate:7.0f} requests/s; CPU per request: server (owner) "
                  f"{server_ms:.3f} ms, client (front-end) {client_ms:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
