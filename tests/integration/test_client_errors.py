"""How gpubench.Client fails: typed errors, one-line messages, retryable or not; and TLS."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpubench.client import Client
from gpubench.errors import (
    AccessDenied,
    CollectorUnavailable,
    ExitCode,
    GpubenchError,
    RequestRefused,
    is_retryable,
)


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A local port that accepts connections and never answers (a hung collector)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_unreachable_collector_is_retryable(closed_port: int, make_run: Any) -> None:
    address = f"127.0.0.1:{closed_port}"
    with Client(address, "any") as client:
        with pytest.raises(CollectorUnavailable) as caught:
            client.submit_run(make_run())
    error = caught.value
    assert str(error) == f"cannot reach the collector at {address} (Connection refused)"
    assert error.exit_code == ExitCode.UNAVAILABLE and is_retryable(error)


def test_hung_collector_hits_the_deadline(silent_port: int) -> None:
    address = f"127.0.0.1:{silent_port}"
    started = time.monotonic()
    with Client(address, "any", timeout=0.5) as client:
        with pytest.raises(CollectorUnavailable, match=f"at {address} did not answer in time"):
            client.get_run("x")
    assert time.monotonic() - started < 5  # the deadline, not gRPC's connect backoff


def test_wrong_and_missing_token(collector: Any) -> None:
    with Client(collector.address, "not-a-token") as client:
        with pytest.raises(AccessDenied, match="token unknown or revoked") as caught:
            client.list_runs()
    assert caught.value.exit_code == ExitCode.AUTH and not is_retryable(caught.value)
    with Client(collector.address, "") as client:  # no authorization header at all
        with pytest.raises(AccessDenied, match="needs a token for listing runs and none was given"):
            client.list_runs()


def test_invalid_run_is_refused_and_not_retryable(collector: Any, make_run: Any) -> None:
    with Client(collector.address, collector.admin_token) as client:
        with pytest.raises(RequestRefused) as caught:
            client.submit_run(make_run(config__model="B9"))
    error = caught.value
    assert "model" in str(error) and "\n" not in str(error)
    assert error.status_code == "INVALID_ARGUMENT" and not is_retryable(error)


def test_too_large_run_is_refused_not_retried(collector_factory: Any, make_run: Any) -> None:
    small = collector_factory(max_message_bytes=4096)
    run = make_run(label="x" * 8000)
    with Client(small.address, small.admin_token) as client:
        with pytest.raises(RequestRefused, match="too large") as caught:
            client.submit_run(run)
    assert caught.value.status_code == "RESOURCE_EXHAUSTED" and not is_retryable(caught.value)


def test_closed_client_says_so(collector: Any) -> None:
    client = Client(collector.address, collector.admin_token)
    client.close()
    with pytest.raises(GpubenchError, match=f"collector at {collector.address}"):
        client.list_runs()


def test_unreadable_ca_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(GpubenchError, match="no-such.pem: cannot read it") as caught:
        Client("127.0.0.1:1", ca=tmp_path / "no-such.pem")
    assert caught.value.exit_code == ExitCode.BAD_DATA


# -- TLS --------------------------------------------------------------------------------


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for localhost/127.0.0.1 signed by it: (ca, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def build(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    server_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = build("gpubench test CA", ca_key, "gpubench test CA", ca_key, True)
    server_cert = build("localhost", server_key, "gpubench test CA", ca_key, False)
    pem = serialization.Encoding.PEM
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca_cert.public_bytes(pem))
    paths[1].write_bytes(server_cert.public_bytes(pem))
    paths[2].write_bytes(
        server_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def test_tls_with_the_collectors_ca(collector_factory: Any, make_run: Any, tmp_path: Path) -> None:
    from gpubench.collector.server import TlsFiles

    ca, cert, key = _certificates(tmp_path)
    secure = collector_factory(tls=TlsFiles(cert=cert, key=key))
    run = make_run()
    with Client(secure.address, secure.admin_token, ca=ca) as client:
        assert client.tls
        client.submit_run(run)
        assert client.get_run(run.run_id).run == run
    # Plaintext to a TLS port, and TLS trusting only the system's roots, both fail plainly.
    for settings in ({}, {"tls": True}):
        with Client(secure.address, secure.admin_token, timeout=3, **settings) as client:
            with pytest.raises(
                CollectorUnavailable, match=f"cannot reach the collector at {secure.address}"
            ):
                client.get_run(run.run_id)


def test_check_access_of_an_unreachable_collector_is_retryable(closed_port: int) -> None:
    address = f"127.0.0.1:{closed_port}"
    with Client(address, "gpb_any") as client:
        with pytest.raises(CollectorUnavailable, match=f"cannot reach the collector at {address}"
                           ) as caught:
            client.check_access()
    assert caught.value.exit_code == ExitCode.UNAVAILABLE and is_retryable(caught.value)


def test_a_collector_without_check_access_is_said_to_be_older() -> None:
    """A server that knows no gpubench service at all answers UNIMPLEMENTED, as a
    collector from before CheckAccess does for that call."""
    from concurrent import futures

    import grpc
    from grpc_health.v1 import health, health_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with Client(f"127.0.0.1:{port}", "gpb_any") as client:
            with pytest.raises(RequestRefused, match="does not offer checking access .*older"
                               ) as caught:
                client.check_access()
        assert caught.value.status_code == "UNIMPLEMENTED" and not is_retryable(caught.value)
    finally:
        server.stop(None).wait()


def test_a_call_the_server_cancelled_is_retryable(make_run: Any) -> None:
    """A server stopping answers the calls it has not handled yet CANCELLED (an older
    collector's front-ends did so for every call in flight when the owner died): a run
    resubmitted is stored once (its run_id), so the agent tries again."""
    from concurrent import futures

    import grpc

    def cancelled(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "gpubench.v1.Collector", {"SubmitRun": grpc.unary_unary_rpc_method_handler(cancelled)}
    )])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with Client(f"127.0.0.1:{port}", "gpb_any") as client:
            with pytest.raises(GpubenchError) as caught:
                client.submit_run(make_run())
        assert caught.value.status_code == "CANCELLED" and is_retryable(caught.value)
    finally:
        server.stop(None).wait()
