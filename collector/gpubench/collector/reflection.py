"""Server reflection in both of its versions: grpc.reflection.v1 and v1alpha.

grpcio-reflection (1.85) registers only v1alpha; tools that speak only v1 (newer
grpcurl, Postman) would find nothing. v1's messages are v1alpha's, field for field
and number for number, in another package, so the same servicer answers v1 too:
its file is made here from v1alpha's descriptor with the package renamed, and
added to the default descriptor pool so that reflection can describe itself.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1ALPHA_SERVICE = reflection.SERVICE_NAME  # "grpc.reflection.v1alpha.ServerReflection"
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE = f"{V1_PACKAGE}.ServerReflection"
V1_FILE = "grpc/reflection/v1/reflection.proto"
SERVICE_NAMES = (V1_SERVICE, V1ALPHA_SERVICE)


def _v1_file() -> descriptor_pb2.FileDescriptorProto:
    """v1alpha's reflection.proto, renamed to v1's package and file."""
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    old, new = f".{proto.package}.", f".{V1_PACKAGE}."
    proto.name, proto.package = V1_FILE, V1_PACKAGE
    proto.ClearField("options")  # v1alpha's language options (Java package, ...)

    def rename(messages: Any) -> None:
        for message in messages:
            for field in message.field:
                if field.type_name.startswith(old):
                    field.type_name = new + field.type_name[len(old):]
            rename(message.nested_type)

    rename(proto.message_type)
    for service in proto.service:
        for method in service.method:
            method.input_type = new + method.input_type[len(old):]
            method.output_type = new + method.output_type[len(old):]
    return proto


def _register_v1_file() -> None:
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(V1_FILE)
    except KeyError:
        pool.AddSerializedFile(_v1_file().SerializeToString())


def enable(service_names: tuple[str, ...], server: grpc.Server) -> None:
    """Serve reflection v1 and v1alpha on `server`, describing `service_names` and both
    reflection services."""
    _register_v1_file()
    servicer = reflection.ReflectionServicer((*service_names, *SERVICE_NAMES))
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    # The same servicer under v1's name, its messages read and written as v1alpha's.
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(V1_SERVICE, {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        ),
    })])
