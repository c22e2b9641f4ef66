"""Your own model through the agent container, its folder mounted at a path the host does
not have: the agent finds the host's folder through its own container's mounts and the
workload container trains the model (docker/README.md, gpu-agent-model, on the CPU).

The agent and torch workload images are built FROM the local base (as conftest.py's
fixtures build them); a small .keras file is saved by the workload image's own Keras
into a folder of this test, which the agent container sees at /models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dockerhost import DOCKER, run

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

TAG = "latest"
AGENT, WORKLOAD = f"gpubench-agent:{TAG}", f"gpubench-workload:{TAG}"
SMALL_MODEL = """
import sys
import keras
from keras import layers
inputs = keras.Input((32, 32, 3))
x = layers.Conv2D(8, 3, strides=2, activation="relu")(layers.Rescaling(1 / 255)(inputs))
x = layers.GlobalAveragePooling2D()(x)
keras.Model(inputs, layers.Dense(3)(x), name="small_cnn").save(sys.argv[1])
"""
# The agent on the CPU, offline, its spool in a folder of the test's.
SMALL_RUN = ("--offline", "--gpus", "0", "--batch", "8", "--epochs", "2",
             "--limit-images", "48")


@pytest.fixture(scope="module")
def built(docker_engine: str) -> None:
    """The agent and torch workload images, FROM the local base (cached layers)."""
    run(["docker/base-image.sh"], timeout=900)
    run(["make", "-s", "-C", "docker", "LOCAL_BASE=1", f"TAG={TAG}", "agent", "workload"],
        timeout=1800)


@pytest.fixture(scope="module")
def models(built: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder on the host with my.keras in it, at a path no container mounts it at."""
    folder = tmp_path_factory.mktemp("stranger") / "models"
    folder.mkdir()
    run([DOCKER, "run", "--rm", "--entrypoint", "python3", "-v", f"{folder}:/out",
         WORKLOAD, "-c", SMALL_MODEL, "/out/my.keras"], timeout=300)
    assert (folder / "my.keras").is_file()
    return folder


def agent(models: Path, spool: Path, *flags: str):
    """The agent container, the models' folder at /models, read-only."""
    spool.mkdir(exist_ok=True)
    return run([DOCKER, "run", "--rm", "-v", "/var/run/docker.sock:/var/run/docker.sock",
                "-v", f"{spool}:/var/lib/gpubench/spool", "-v", f"{models}:/models:ro",
                AGENT, *flags], timeout=900, check=False)


def records(spool: Path) -> list[dict]:
    """The run records the agent left in the spool (sent or not)."""
    return [json.loads(p.read_text()) for folder in ("pending", "sent")
            for p in sorted((spool / folder).glob("*.json"))]


def test_a_model_mounted_at_another_path_trains(models: Path, tmp_path: Path) -> None:
    done = agent(models, tmp_path / "spool", "--models", "/models/my.keras", *SMALL_RUN)
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = records(tmp_path / "spool")
    assert record["result"]["status"] == "RUN_STATUS_OK"
    assert record["result"]["epoch2_seconds"] > 0


def test_a_file_on_no_mount_is_exit_2_naming_what_to_mount(models: Path,
                                                           tmp_path: Path) -> None:
    # A Python file of the agent image itself: in its own file system, on no mount.
    done = agent(models, tmp_path / "spool", "--models", "/usr/lib/python3.11/os.py:build",
                 *SMALL_RUN)
    message = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--model /usr/lib/python3.11/os.py:build: /usr/lib/python3.11 is on no mount of " \
           "the agent's own container" in message
    assert "-v /host/folder:/models" in message
    assert records(tmp_path / "spool") == []


def test_a_missing_file_is_exit_2_before_anything_runs(models: Path, tmp_path: Path) -> None:
    done = agent(models, tmp_path / "spool", "--models", "/models/none.keras", *SMALL_RUN)
    message = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--models /models/none.keras: no such file" in message
