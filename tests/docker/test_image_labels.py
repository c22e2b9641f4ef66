"""Every image says what it is in the OCI's labels (title, description, version, revision,
created, source, licenses), and the version on it is the one its code says and the
checkout's, the git tag's (docker/build.sh passes it; pyproject.toml's setuptools-scm).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime

import pytest
from dockerhost import DOCKER, REPO, Images, run

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

OCI = "org.opencontainers.image."
# Present on every image; source may be empty (a checkout with no origin remote), and the
# revision is empty where there is no git to ask.
LABELS = ("title", "description", "version", "revision", "created", "source", "licenses")
LICENSE = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]


def labels_of(image: str) -> dict[str, str]:
    """The image's labels, as the engine has them."""
    done = run([DOCKER, "image", "inspect", "--format", "{{json .Config.Labels}}", image],
               timeout=30)
    return json.loads(done.stdout) or {}


def checkout_version() -> str:
    """The version a build of this tree carries (what docker/build.sh asks for too)."""
    return run([sys.executable, "-m", "setuptools_scm"], timeout=60).stdout.strip()


def checkout_revision() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


@pytest.mark.parametrize("which", ["agent", "workload", "workload_tensorflow", "collector"])
def test_each_image_carries_the_oci_labels_and_its_codes_version(images: Images,
                                                                 which: str) -> None:
    image = getattr(images, which)
    labels = labels_of(image)
    assert [name for name in LABELS if OCI + name not in labels] == [], labels
    assert labels[OCI + "title"] == image.partition(":")[0]
    assert labels[OCI + "description"].startswith("The gpubench ")
    assert labels[OCI + "licenses"] == LICENSE
    assert labels[OCI + "revision"] == checkout_revision()
    datetime.fromisoformat(labels[OCI + "created"].replace("Z", "+00:00"))

    version = labels[OCI + "version"]
    assert version == checkout_version()
    command = "gpubench-collector" if which == "collector" else "gpubench-agent"
    said = run([DOCKER, "run", "--rm", "--entrypoint", command, image, "--version"],
               timeout=120).stdout.strip()
    assert said == f"{command}, version {version}"
