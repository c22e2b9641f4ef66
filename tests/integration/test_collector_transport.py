"""TLS with a certificate made here, plaintext only on loopback, health and reflection."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from factories import make_run
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gpubench.collector.server import TlsFiles, create_server, is_loopback
from gpubench.collector.store import Store
from gpubench.errors import GpubenchError
from gpubench.v1 import collector_pb2 as pb
from gpubench.v1 import collector_pb2_grpc


def self_signed(folder: Path) -> TlsFiles:
    """A certificate for localhost and 127.0.0.1, valid for a day."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpubench test collector")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    files = TlsFiles(folder / "collector.crt", folder / "collector.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


def test_tls_with_a_generated_certificate(collector_factory, tmp_path: Path) -> None:
    tls = self_signed(tmp_path)
    collector = collector_factory(tls=tls)
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.cert.read_bytes())
    with grpc.secure_channel(collector.address, credentials) as channel:
        stub = collector_pb2_grpc.CollectorStub(channel)
        run = make_run()
        ack = stub.SubmitRun(pb.SubmitRunRequest(run=run), metadata=collector.metadata(),
                             timeout=10)
        assert ack.run_id == run.run_id
    # A plaintext client cannot talk to the TLS port.
    with grpc.insecure_channel(collector.address) as channel:
        stub = collector_pb2_grpc.CollectorStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=collector.metadata(),
                        timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_that_does_not_trust_the_certificate_is_refused(collector_factory,
                                                                  tmp_path: Path) -> None:
    collector = collector_factory(tls=self_signed(tmp_path))
    (tmp_path / "other").mkdir()
    stranger = self_signed(tmp_path / "other").cert.read_bytes()  # another certificate
    credentials = grpc.ssl_channel_credentials(root_certificates=stranger)
    with grpc.secure_channel(collector.address, credentials) as channel:
        stub = collector_pb2_grpc.CollectorStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.ListRuns(pb.ListRunsRequest(), metadata=collector.metadata(), timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_plaintext_is_refused_off_loopback_unless_insecure(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.duckdb")
    try:
        with pytest.raises(GpubenchError, match="--host 0.0.0.0: plaintext is only allowed"):
            create_server(store, host="0.0.0.0", port=0)
        server, port = create_server(store, host="0.0.0.0", port=0, insecure=True)
        assert port > 0
        server.stop(None)
        server, port = create_server(store, host="0.0.0.0", port=0, tls=self_signed(tmp_path))
        assert port > 0
        server.stop(None)
    finally:
        store.close()


def test_unreadable_tls_files_are_named(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.duckdb")
    try:
        missing = TlsFiles(tmp_path / "nope.crt", tmp_path / "nope.key")
        with pytest.raises(GpubenchError, match="nope.crt: cannot read"):
            create_server(store, tls=missing)
    finally:
        store.close()


def test_loopback_addresses() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.5.0.1", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "10.0.0.5", "::", "collector.lab"]))


def test_health_answers_without_a_token(collector) -> None:
    health = health_pb2_grpc.HealthStub(collector.channel())
    for service in ("", "gpubench.v1.Collector", "gpubench.v1.Admin"):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as caught:
        health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_and_describes_the_services(collector) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(collector.channel())
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="gpubench.v1.Collector"),
    ]
    listed, described = list(stub.ServerReflectionInfo(iter(requests), timeout=5))
    names = {s.name for s in listed.list_services_response.service}
    assert {"gpubench.v1.Collector", "gpubench.v1.Admin", "grpc.health.v1.Health"} <= names
    files = described.file_descriptor_response.file_descriptor_proto
    assert files and any(b"SubmitRun" in f for f in files)


def test_reflection_v1_is_served_as_well_as_v1alpha(collector) -> None:
    """Tools that speak only grpc.reflection.v1 (newer grpcurl, Postman) find the services.

    v1's messages are v1alpha's, field for field, in another package: the v1alpha
    classes speak it on the wire."""
    from google.protobuf import descriptor_pb2

    call = collector.channel().stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="gpubench.v1.Collector"),
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="grpc.reflection.v1.ServerReflection"),
    ]
    listed, described, itself = list(call(iter(requests), timeout=5))
    names = {s.name for s in listed.list_services_response.service}
    assert {"gpubench.v1.Collector", "gpubench.v1.Admin", "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names
    files = [descriptor_pb2.FileDescriptorProto.FromString(f)
             for f in described.file_descriptor_response.file_descriptor_proto]
    assert "gpubench/v1/collector.proto" in {f.name for f in files}
    (v1,) = [descriptor_pb2.FileDescriptorProto.FromString(f)
             for f in itself.file_descriptor_response.file_descriptor_proto]
    assert v1.package == "grpc.reflection.v1"
    assert v1.service[0].method[0].input_type == ".grpc.reflection.v1.ServerReflectionRequest"
