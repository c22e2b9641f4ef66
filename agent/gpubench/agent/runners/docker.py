"""The docker runner: the workload in the pinned workload image (the one module using
the docker SDK).

The container gets every GPU the way the agent chose for this host (gpu_access.py: the
agent's own container's, the NVIDIA Container Toolkit's, CDI's, or the device nodes and
the driver's libraries), writes its events on stdout (streamed back here, demultiplexed
from stderr), and is removed on every way out: normal end, failure, Ctrl-C.
"""

from __future__ import annotations

import contextlib
import queue
import re
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gpubench import models
from gpubench.agent import compat
from gpubench.agent.runners import gpu_access
from gpubench.agent.runners.base import (
    Outcome,
    OutputLog,
    Runner,
    RunnerOptions,
    SearchRequest,
    Workload,
    WorkloadRequest,
    events_from_lines,
)
from gpubench.agent.runners.host_paths import host_path
from gpubench.agent.signals_main import threads_leave_signals
from gpubench.errors import ExitCode, GpubenchError
from gpubench.events import Event
from gpubench.settings import WORKLOAD_MODULE
from gpubench.versions import DISTRIBUTION, VERSION

# Where the release publishes the images (docs/release.md; its dist job checks that this
# is the repository's own registry): a released agent starts the workload image of its
# own version from there, a development copy the local build's (docker/build.sh).
REGISTRY = "ghcr.io/gpubench"
LOCAL_IMAGE = f"{compat.WORKLOAD_REPOSITORY}:latest"
RELEASE_VERSION = re.compile(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?")


def default_image(version: str = VERSION) -> str:
    """The workload image an agent of `version` starts when none is given: the published
    one of a release version, else the local build."""
    if RELEASE_VERSION.fullmatch(version):
        return f"{REGISTRY}/{compat.WORKLOAD_REPOSITORY}:{version}"
    return LOCAL_IMAGE


DEFAULT_IMAGE = default_image()
WORKLOAD_COMMAND = ("python3", "-m", WORKLOAD_MODULE)
DATA_MOUNT = "/data"
MODEL_MOUNT = "/model"  # the folder of a --model file
# The workload's cache (the generated photos, JAX's compiled programs): a volume of the
# engine's that outlives each container, so that a second run on the host generates and
# compiles nothing the first one did (`docker volume rm gpubench-cache` starts afresh).
CACHE_VOLUME = "gpubench-cache"
CACHE_MOUNT = "/var/cache/gpubench"
# Seconds after SIGINT, then after SIGTERM, before the next signal (runners/local.py).
STOP_TIMEOUTS = (0.5, 0.5)
# The signals the agent stops on (cli.py: SIGTERM as Ctrl-C).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The label every container the agent makes carries: its role, workload or probe.
ROLE_LABEL = "org.gpubench.role"
# Lines of a failed probe's stderr its error quotes.
PROBE_ERROR_LINES = 5
# How long a container's process list stays fresh (asking docker is an HTTP call).
PIDS_TTL = 1.0


class DockerUnavailable(GpubenchError):
    """No docker engine to talk to, or the image is missing."""

    exit_code = ExitCode.FAILURE


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold a Ctrl-C (or SIGTERM) that arrives in the block, and raise it once the
    block has ended. Outside the main thread signals land elsewhere: nothing held."""
    held: list[int] = []
    try:
        previous = {sig: signal.signal(sig, lambda signum, _: held.append(signum))
                    for sig in STOP_SIGNALS}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])  # as if it arrived now


def _remove(container: Any | None) -> None:
    """Remove the container, running or not, when there is one. Call it in
    _interrupts_held(): a Ctrl-C must not cut the request short, nor the clean-up
    around it."""
    if container is None:
        return
    try:
        container.remove(force=True)
    except Exception:  # noqa: BLE001 - already gone, being removed, or docker went away
        pass


def image_digest(image: Any) -> str:
    """The image's registry digest ('sha256:...') where it has one, else its local Id."""
    for reference in image.attrs.get("RepoDigests") or ():
        if "@" in reference:
            return reference.split("@", 1)[1]
    return str(image.id)


class _Lines:
    """Splits a byte stream's chunks into text lines."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]

    def rest(self) -> list[str]:
        rest, self._buffer = self._buffer, b""
        return [rest.decode("utf-8", "replace")] if rest else []


class DockerWorkload(Workload):
    """A workload container."""

    def __init__(
        self,
        client: Any,
        container: Any,
        image: str,
        digest: str,
        log: OutputLog,
        stop_timeouts: tuple[float, float],
    ) -> None:
        self._client = client
        self._container = container
        self._image = image
        self._digest = digest
        self._log = log
        self._stop_timeouts = stop_timeouts
        self._interrupted = False
        self._pids: frozenset[int] = frozenset()
        self._pids_at = 0.0
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="workload-logs", daemon=True)
        with threads_leave_signals():
            self._reader.start()

    @property
    def container_id(self) -> str:
        """The container's id."""
        return str(self._container.id)

    @property
    def pid(self) -> int | None:
        """None: the container's main process lives in its own PID namespace, and NVML
        finds the workload's processes through pids() instead."""
        return None

    def _read(self) -> None:
        # attach(logs=True) replays what was written before we attached, then follows.
        out, err = _Lines(), _Lines()
        try:
            stream = self._container.attach(
                stdout=True, stderr=True, stream=True, logs=True, demux=True
            )
            for stdout_chunk, stderr_chunk in stream:
                if stdout_chunk:
                    for line in out.feed(stdout_chunk):
                        self._lines.put(line)
                if stderr_chunk:
                    for line in err.feed(stderr_chunk):
                        self._log.write(line)
        except Exception as exc:  # noqa: BLE001 - the stream ends however docker ends it
            self._log.write(f"(the container's output stream ended: {exc})")
        finally:
            for line in out.rest():
                self._lines.put(line)
            for line in err.rest():
                self._log.write(line)
            self._lines.put(None)

    def _stdout_lines(self) -> Iterator[str]:
        while True:
            line = self._lines.get()
            if line is None:
                return
            yield line

    def events(self) -> Iterator[Event]:
        yield from events_from_lines(self._stdout_lines(), self._log)

    def pids(self) -> frozenset[int]:
        now = time.monotonic()
        if now - self._pids_at >= PIDS_TTL:
            self._pids_at = now
            try:
                top = self._container.top(ps_args="-eo pid")
                column = top["Titles"].index("PID")
                self._pids = frozenset(int(row[column]) for row in top["Processes"] or ())
            except Exception:  # noqa: BLE001 - a stopped container has no processes
                self._pids = frozenset()
        return self._pids

    def stop(self) -> None:
        self._interrupted = True
        for sig, timeout in zip((signal.SIGINT, signal.SIGTERM), self._stop_timeouts, strict=True):
            try:
                self._container.kill(signal=int(sig))
                self._container.wait(timeout=timeout)
                return
            except Exception:  # noqa: BLE001 - still running after the timeout, or gone
                continue
        try:
            self._container.kill(signal=int(signal.SIGKILL))
        except Exception:  # noqa: BLE001
            pass

    def wait(self) -> Outcome:
        status = self._container.wait()
        self._reader.join(timeout=10)
        code = int(status.get("StatusCode", -1))
        # A process killed by a signal leaves 128 + the signal's number.
        killed = code - 128 if 128 < code < 128 + 65 else None
        return Outcome(
            exit_code=None if killed else code,
            signal=killed,
            interrupted=self._interrupted,
            output_tail=self._log.tail(),
            log_path=self._log.path,
            image=self._image,
            image_digest=self._digest,
        )

    def close(self) -> None:
        with _interrupts_held():  # the container removed and the log closed, whatever comes
            _remove(self._container)
            self._reader.join(timeout=2)
            self._log.close()
            try:
                self._client.close()
            except Exception:  # noqa: BLE001
                pass


class DockerRunner(Runner):
    """Runs the workload in `image` through the docker engine of this host.

    `command` replaces the workload's command inside the container and `mounts`
    (host path -> container path, read-only) adds folders: for a stand-in workload.
    """

    name = "docker"

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        *,
        gpus: bool = True,
        gpu_way: str = gpu_access.AUTO,
        environment: dict[str, str] | None = None,
        stop_timeouts: tuple[float, float] = STOP_TIMEOUTS,
        command: tuple[str, ...] = WORKLOAD_COMMAND,
        mounts: dict[str, str] | None = None,
    ) -> None:
        self.image = image
        self.gpus = gpus
        self.gpu_way = gpu_way
        self.environment = dict(environment or {})
        self.stop_timeouts = stop_timeouts
        self.command = tuple(command)
        self.mounts = dict(mounts or {})
        self._access: gpu_access.GpuAccess | None = None
        self._own: tuple[dict[str, Any] | None] | None = None  # (the inspect,), once asked

    @classmethod
    def from_options(cls, options: RunnerOptions) -> DockerRunner:
        return cls(options.image or DEFAULT_IMAGE, gpus=options.gpu_count > 0,
                   gpu_way=options.gpu_access)

    @property
    def where(self) -> str:
        return f"in the image {self.image}"

    def fit_to(self, gpus: Sequence[compat.Gpu]) -> str | None:
        """The default torch workload image's tag by the GPUs' compute capability
        (compat.torch_image_for): its CUDA 12.9 variant where only that one has kernels
        for them (Blackwell). Any other image is run as given."""
        self.image, line = compat.torch_image_for(self.image, gpus)
        return line or None

    def prepare(self) -> str | None:
        access = self.gpu_access()
        return None if access is None else \
            f"GPUs: the workload container gets them through {access.line}"

    def probe(self, gpu_count: int) -> str:
        output = self.probe_output()
        self._check_container_sees_gpus(compat.driver_from_probe(output), gpu_count)
        return output

    def _check_container_sees_gpus(self, driver: dict[str, Any] | None,
                                   gpu_count: int) -> None:
        """Raise NoGpuAccess (exit 2) when the probe's container, given the GPUs as the
        workload will be, saw fewer than the run needs (an image too old to say: no
        check)."""
        if driver is None or int(driver.get("devices") or 0) >= gpu_count:
            return
        access = self.gpu_access()
        seen = driver.get("error") or f"it sees {driver.get('devices')} GPU(s)"
        raise gpu_access.NoGpuAccess(
            f"the workload container, given the GPUs through "
            f"{access.line if access else 'no way'}, cannot use {gpu_count} GPU(s): {seen}. "
            f"{gpu_access.INSTALL_ADVICE}")

    def gpu_access(self) -> gpu_access.GpuAccess | None:
        """How the workload container gets the GPUs, chosen once (gpu_access.choose);
        None for a run without GPUs. Raises NoGpuAccess (exit 2) when there is no way."""
        if not self.gpus:
            return None
        if self._access is None:
            client = self._client()
            try:
                self._access = gpu_access.choose(self.gpu_way, engine=client.info(),
                                                 own_container=self._own_container(client))
            finally:
                client.close()
        return self._access

    def _own_container(self, client: Any) -> dict[str, Any] | None:
        """The engine's `inspect` of the agent's own container, asked once; None when the
        agent runs on the host, or in a container of another engine (whose files are then
        this host's as the engine sees them)."""
        if self._own is None:
            import docker

            found: dict[str, Any] | None = None
            container_id = gpu_access.own_container_id()
            if container_id is not None:
                try:
                    found = client.containers.get(container_id).attrs
                except docker.errors.NotFound:
                    found = None
            self._own = (found,)
        return self._own[0]

    def _gpu_arguments(self) -> dict[str, Any]:
        """The containers.create/run arguments that give a container the GPUs."""
        import docker

        access = self.gpu_access()
        if access is None:
            return {}
        return {
            "device_requests": [
                docker.types.DeviceRequest(
                    driver=request.driver, count=request.count,
                    device_ids=list(request.device_ids),
                    capabilities=[list(c) for c in request.capabilities])
                for request in access.device_requests],
            "devices": list(access.devices),
            "mounts": [docker.types.Mount(target=inside, source=source, type="bind",
                                          read_only=True) for source, inside in access.mounts],
            "environment": dict(access.environment),
        }

    def probe_output(self) -> str:
        """What `probe --json --driver` prints in the image, in one short container given
        the GPUs as the workload will be (removed after). Raises NoGpuAccess (exit 2) when
        the engine will not start a container with them."""
        import docker

        gpu = self.gpu_access() is not None
        client = self._client()
        container = None
        try:
            image = client.images.get(self.image)
            command = [*self.command, "probe", "--json", *(["--driver"] if gpu else [])]
            with _interrupts_held():
                container = self._create(client, image, command, self._volumes(), "probe")
            container.start()
            code = int(container.wait().get("StatusCode", -1))
            output = container.logs(stdout=True, stderr=False)
            if code != 0:
                said = container.logs(stdout=False, stderr=True, tail=PROBE_ERROR_LINES)
                raise DockerUnavailable(
                    f"the probe in the image {self.image} exited with {code}: "
                    f"{said.decode('utf-8', 'replace').strip() or 'it said nothing'}")
        except docker.errors.ImageNotFound:
            raise DockerUnavailable(self._missing_image()) from None
        except docker.errors.APIError as exc:
            if not gpu:
                raise
            access = self.gpu_access()
            raise gpu_access.NoGpuAccess(
                f"the docker engine would not start a container given the GPUs through "
                f"{access.line if access else 'no way'} ({exc.explanation or exc}). "
                f"{gpu_access.INSTALL_ADVICE}") from None
        finally:
            with _interrupts_held():
                _remove(container)
                client.close()
        return output.decode("utf-8", "replace")

    def _volumes(self) -> dict[str, dict[str, str]]:
        """This runner's folders, read-only (host path -> docker's volume entry)."""
        return {host: {"bind": inside, "mode": "ro"} for host, inside in self.mounts.items()}

    def _create(self, client: Any, image: Any, command: list[str],
                volumes: dict[str, dict[str, str]], role: str, **extra: Any) -> Any:
        """Make (not start) a container of `image` running `command`, given the GPUs and
        this runner's environment, labelled with its role. The engine goes on making it
        when a Ctrl-C ends the wait for its answer: call this in _interrupts_held(), so
        that the answer names what to remove."""
        gpu = self._gpu_arguments()
        return client.containers.create(
            image.id,
            command=command,
            detach=True,
            device_requests=gpu.get("device_requests", []),
            devices=gpu.get("devices", []),
            mounts=gpu.get("mounts", []),
            environment={"PYTHONUNBUFFERED": "1", "GPUBENCH_CACHE": CACHE_MOUNT,
                         **self.environment,
                         **gpu.get("environment", {})},
            volumes=volumes,
            labels={ROLE_LABEL: role},
            **extra,
        )

    def _given_folders(self, client: Any, request: WorkloadRequest | SearchRequest,
                       ) -> tuple[dict[str, dict[str, str]], list[str]]:
        """The container's folders (this runner's, the data folder, a model file's
        folder: read-only, under fixed paths; the cache volume, read-write) and the
        workload's arguments naming them there. The engine reads each folder on the
        host: where the agent runs in a container, through that container's mounts
        (host_paths.py)."""
        own = self._own_container(client)
        volumes = self._volumes()
        volumes[CACHE_VOLUME] = {"bind": CACHE_MOUNT, "mode": "rw"}
        args = request.arguments()
        if request.setting("data") and request.setting("data") != "synthetic":
            folder = str(Path(request.setting("data")).expanduser().resolve())
            source = host_path(folder, own, what=f"--data {request.setting('data')}")
            volumes[source] = {"bind": DATA_MOUNT, "mode": "ro"}
            args[args.index("--data") + 1] = DATA_MOUNT
        if models.kind_of(request.model) in (models.FILE, models.FUNCTION):
            # A model file (or the Python file that builds it) goes in read-only, its
            # folder under a fixed path: the model is named there.
            file, colon, function = request.model.rpartition(":") if ":" in request.model \
                else (request.model, "", "")
            model_file = Path(file).expanduser().resolve()
            source = host_path(str(model_file.parent), own, what=f"--model {request.model}")
            volumes[source] = {"bind": MODEL_MOUNT, "mode": "ro"}
            args[args.index("--model") + 1] = (f"{MODEL_MOUNT}/{model_file.name}{colon}"
                                               f"{function}")
        return volumes, args

    def _missing_image(self) -> str:
        variant = next((v for v in compat.IMAGE_VARIANTS
                        if self.image.endswith((f":{v}", f"-{v}"))), "")
        return (f"image {self.image}: not on this host (docker pull {self.image}, or build "
                f"it: docker/build.sh workload{f'-{variant}' if variant else ''})")

    def _client(self) -> Any:
        try:
            import docker
        except ImportError:
            raise DockerUnavailable(
                f"the docker runner needs the docker SDK (pip install '{DISTRIBUTION}[agent]')"
            ) from None
        try:
            client = docker.from_env()
            client.ping()
        except Exception as exc:  # noqa: BLE001 - every way of not reaching the engine
            raise DockerUnavailable(f"cannot reach the docker engine ({exc})") from None
        return client

    def start(self, request: WorkloadRequest | SearchRequest, *,
              log_path: Path | None = None) -> DockerWorkload:
        import docker

        client = self._client()
        try:
            image = client.images.get(self.image)
        except docker.errors.ImageNotFound:
            client.close()
            raise DockerUnavailable(self._missing_image()) from None
        try:
            volumes, args = self._given_folders(client, request)
        except BaseException:
            client.close()
            raise
        log = OutputLog(log_path)
        container = None
        try:
            with _interrupts_held():
                container = self._create(
                    client, image, [*self.command, *args], volumes, "workload",
                    shm_size="2g")  # the framework's data loader workers share memory
            workload = DockerWorkload(
                client, container, self.image, image_digest(image), log, self.stop_timeouts
            )
            container.start()
            return workload
        except BaseException as exc:  # a Ctrl-C while starting included: leave nothing behind
            with _interrupts_held():
                _remove(container)
                log.close()
                client.close()
            if isinstance(exc, docker.errors.APIError):
                raise DockerUnavailable(f"cannot start the workload container ({exc})") from None
            raise
