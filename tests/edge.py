"""The collector's edge (docker/edge/haproxy.cfg) run for tests and the fault campaign:
Debian's HAProxy, unpacked by `make haproxy` into .tools/haproxy (or one on PATH), with
the project's own configuration file, a self-signed certificate made here, and its
listening sockets opened here on port 0 and handed over (`bind fd@N`), so that no port
is guessed.
"""

from __future__ import annotations

import datetime
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "docker" / "edge" / "haproxy.cfg"
TOOLS = REPO / ".tools" / "haproxy"
HOSTNAME = "localhost"  # the certificate's name; resolves to 127.0.0.1
MISSING = ("HAProxy is not here: `make haproxy` fetches Debian's package into "
           ".tools/haproxy (apt-get download + dpkg -x), or install haproxy")


def haproxy_binary() -> Path | None:
    """The HAProxy to run: $GPUBENCH_HAPROXY, .tools/haproxy's, or one on PATH."""
    given = os.environ.get("GPUBENCH_HAPROXY")
    if given:
        return Path(given)
    unpacked = TOOLS / "usr" / "sbin" / "haproxy"
    if unpacked.exists():
        return unpacked
    found = shutil.which("haproxy")
    return Path(found) if found else None


def haproxy_env(binary: Path) -> dict[str, str]:
    """The environment HAProxy runs in: an unpacked package finds its libraries beside it."""
    env = dict(os.environ)
    root = binary.resolve().parents[2]  # .../usr/sbin/haproxy -> the unpacked root
    libraries = [str(p) for p in sorted((root / "usr" / "lib").glob("*-linux-gnu"))]
    if libraries:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [*libraries, *filter(None, [env.get("LD_LIBRARY_PATH")])])
    return env


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A fresh key and certificate for HOSTNAME: (HAProxy's PEM, key and chain in one;
    the certificate alone, for clients to trust)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOSTNAME)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOSTNAME)]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    folder.mkdir(parents=True, exist_ok=True)
    bundle, ca = folder / "edge.pem", folder / "edge-cert.pem"
    bundle.write_bytes(cert_pem + key_pem)
    bundle.chmod(0o600)
    ca.write_bytes(cert_pem)
    return bundle, ca


@dataclass
class Edge:
    """A running edge: TLS on `grpc_port` (to the collector) and `site_port` (the site)."""

    process: subprocess.Popen
    grpc_port: int
    site_port: int
    ca: Path  # the certificate clients trust
    log: Path
    _sockets: list[socket.socket] = field(default_factory=list, repr=False)

    @property
    def grpc_address(self) -> str:
        """The collector through the edge, by the certificate's name."""
        return f"{HOSTNAME}:{self.grpc_port}"

    def tls_context(self) -> ssl.SSLContext:
        """A client context trusting the edge's certificate."""
        context = ssl.create_default_context(cafile=str(self.ca))
        return context

    def stop(self) -> None:
        """Stop HAProxy (SIGTERM, then SIGKILL) and close the listening sockets."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        for sock in self._sockets:
            sock.close()

    def __enter__(self) -> Edge:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def start_edge(binary: Path, folder: Path, *, collector: str, site: str,
               settings: dict[str, str] | None = None, listen: str = "127.0.0.1") -> Edge:
    """HAProxy with docker/edge/haproxy.cfg in front of `collector` and `site` (host:port),
    its two listening sockets made here on `listen`:0; `settings` are the file's
    EDGE_* variables to change (EDGE_CONNECTIONS_PER_ADDRESS, timeouts...)."""
    bundle, ca = self_signed(folder)
    sockets = [socket.create_server((listen, 0), backlog=4096) for _ in range(2)]
    for sock in sockets:
        sock.set_inheritable(True)
    grpc_sock, site_sock = sockets
    env = haproxy_env(binary)
    # HAProxy wants two descriptors a connection: keep maxconn within this process's limit.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY:
        env["EDGE_MAXCONN"] = str(min(20_000, (hard - 200) // 2))
    env.update({
        "EDGE_CERT": str(bundle),
        "EDGE_COLLECTOR": collector,
        "EDGE_SITE": site,
        "EDGE_GRPC_BIND": f"fd@{grpc_sock.fileno()}",
        "EDGE_SITE_BIND": f"fd@{site_sock.fileno()}",
        **(settings or {}),
    })
    log = folder / "haproxy.log"
    check = subprocess.run([str(binary), "-c", "-q", "-f", str(CONFIG)], env=env,
                           capture_output=True, text=True, pass_fds=[s.fileno() for s in sockets],
                           timeout=60, check=False)
    if check.returncode != 0:
        for sock in sockets:
            sock.close()
        raise RuntimeError(f"{CONFIG}: haproxy -c refused it:\n{check.stdout}{check.stderr}")
    with log.open("wb") as out:
        # -db: in the foreground, its log on stderr; -W would add a master process.
        process = subprocess.Popen([str(binary), "-db", "-f", str(CONFIG)], env=env,
                                   stdout=out, stderr=subprocess.STDOUT,
                                   pass_fds=[s.fileno() for s in sockets])
    edge = Edge(process, grpc_sock.getsockname()[1], site_sock.getsockname()[1], ca, log,
                sockets)
    try:
        wait_serving(edge)
    except BaseException:
        edge.stop()
        raise
    return edge


def wait_serving(edge: Edge, within_s: float = 60.0) -> None:
    """Until a TLS handshake on the site's port succeeds (HAProxy has taken its sockets)."""
    deadline = time.monotonic() + within_s
    while True:
        if edge.process.poll() is not None:
            raise RuntimeError(f"haproxy exited {edge.process.returncode}: "
                               f"{edge.log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", edge.site_port), timeout=5) as raw, \
                    edge.tls_context().wrap_socket(raw, server_hostname=HOSTNAME):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
