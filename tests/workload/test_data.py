"""The benchmark's data: the synthetic set, reading a folder, the split, bad data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from workload_helpers import write_png

from gpubench.agent.workload import data, synthetic
from gpubench.errors import DataError, ExitCode
from gpubench.settings import VALIDATION_SPLIT


def test_synthetic_images_depend_only_on_their_index() -> None:
    first, again, other = synthetic.render(5), synthetic.render(5), synthetic.render(6)
    assert first.size == (300, 200) and first.mode == "RGB"
    assert np.array_equal(np.asarray(first), np.asarray(again))
    assert not np.array_equal(np.asarray(first), np.asarray(other))


def test_synthetic_classes_are_balanced_and_named_like_the_public_set() -> None:
    names = [synthetic.file_name(i) for i in range(synthetic.IMAGE_COUNT)]
    counts = {c: sum(n.startswith(c + "/") for n in names) for c in ("paper", "rock", "scissors")}
    assert counts == {"paper": 712, "rock": 712, "scissors": 712}
    assert all(synthetic.image_index(n) == i for i, n in enumerate(names))


def test_synthetic_pngs_are_photo_sized_not_flat_drawings(tmp_path: Path) -> None:
    folder = synthetic.ensure(6, tmp_path / "set")
    sizes = [(folder / synthetic.file_name(i)).stat().st_size for i in range(6)]
    # A flat drawing of 300x200 compresses to a few KB; noisy photos stay large.
    assert min(sizes) > 40_000, sizes


def test_ensure_generates_only_what_is_missing_and_atomically(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    synthetic.ensure(9, folder)
    pngs = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.png"))
    assert pngs == sorted(synthetic.file_name(i) for i in range(9))
    first = (folder / synthetic.file_name(0)).stat().st_mtime_ns
    synthetic.ensure(12, folder)
    assert (folder / synthetic.file_name(0)).stat().st_mtime_ns == first  # not rewritten
    assert len(list(folder.rglob("*.png"))) == 12
    assert not [p for p in folder.rglob("*") if p.name.startswith(".tmp-")]


def test_split_of_the_protocol_size_is_1709_and_427() -> None:
    dataset = data.Dataset("x", Path("."), ("a", "b", "c"), ("f",) * 2136, (0,) * 2136, 0, "",
                           12, VALIDATION_SPLIT)
    assert (dataset.train_count, dataset.validation_count) == (1709, 427)


@pytest.mark.slow  # Keras in a child: a framework started, make test-e2e
def test_order_and_split_match_keras_image_dataset_from_directory(image_folder) -> None:
    root = image_folder({"paper": 7, "rock": 9, "scissors": 8})
    ours = data.read_dataset(root, seed=12, validation_split=0.2)
    script = (
        "import json, sys\n"
        "from keras.src.utils import dataset_utils, image_dataset_utils\n"
        "paths, labels, classes = dataset_utils.index_directory(sys.argv[1], 'inferred',"
        " image_dataset_utils.ALLOWLIST_FORMATS, shuffle=True, seed=12, verbose=False)\n"
        "train, _ = dataset_utils.get_training_or_validation_split(paths, labels, 0.2,"
        " 'training')\n"
        "print(json.dumps([paths, [int(x) for x in labels], classes, len(train)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True,
                          text=True, check=True, env={**os.environ, "KERAS_BACKEND": "torch"})
    paths, labels, classes, train = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(ours.files) == [os.path.relpath(p, root) for p in paths]
    assert list(ours.labels) == labels
    assert list(ours.class_names) == classes
    assert ours.train_count == train


def test_fingerprint_follows_content_and_names(image_folder) -> None:
    root = image_folder({"a": 3, "b": 3})
    before = data.read_dataset(root, seed=12, validation_split=0.2).fingerprint
    assert data.read_dataset(root, seed=12, validation_split=0.2).fingerprint == before
    write_png(root / "a" / "000.png", seed=999)
    assert data.read_dataset(root, seed=12, validation_split=0.2).fingerprint != before


def test_non_image_files_are_skipped_and_counted(image_folder) -> None:
    root = image_folder({"a": 3, "b": 3})
    (root / "a" / "notes.txt").write_text("not an image")
    (root / "README.md").write_text("about")
    dataset = data.read_dataset(root, seed=12, validation_split=0.2)
    assert dataset.image_count == 6
    assert dataset.skipped_files == 2
    assert dataset.describe().skipped_files == 2


def test_grayscale_palette_and_rgba_images_become_rgb(tmp_path: Path) -> None:
    for mode in ("L", "P", "RGBA"):
        path = write_png(tmp_path / f"{mode}.png", mode=mode)
        pixels = data.decode_image(path, 32)
        assert pixels.shape == (32, 32, 3) and pixels.dtype == np.uint8
    gray = data.decode_image(tmp_path / "L.png", 20)
    assert np.array_equal(gray[..., 0], gray[..., 2])  # grey replicated into R, G and B
    rgba = Image.open(tmp_path / "RGBA.png")
    kept = data.decode_image(tmp_path / "RGBA.png", 20)
    assert np.array_equal(kept, np.asarray(rgba.convert("RGB").resize((20, 20), Image.BILINEAR)))


def test_missing_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nowhere: no such data folder") as caught:
        data.read_dataset(tmp_path / "nowhere", seed=12, validation_split=0.2)
    assert caught.value.exit_code == ExitCode.BAD_DATA


def test_fewer_than_two_classes_is_refused(image_folder) -> None:
    root = image_folder({"rock": 4})
    with pytest.raises(DataError, match=r"needs at least 2 class folders.*found 1"):
        data.read_dataset(root, seed=12, validation_split=0.2)


def test_a_class_without_images_is_named(image_folder) -> None:
    root = image_folder({"rock": 4, "paper": 0})
    (root / "paper" / "readme.txt").write_text("no images here")
    with pytest.raises(DataError, match=r"paper: class folder has no images"):
        data.read_dataset(root, seed=12, validation_split=0.2)


def test_truncated_image_is_named(image_folder) -> None:
    root = image_folder({"rock": 3, "paper": 3})
    broken = root / "rock" / "001.png"
    broken.write_bytes(broken.read_bytes()[:200])
    with pytest.raises(DataError, match=r"rock/001\.png: not a readable image"):
        data.read_dataset(root, seed=12, validation_split=0.2)
    with pytest.raises(DataError, match=r"rock/001\.png: not a readable image"):
        data.decode_image(broken, 32)


def test_file_that_is_not_an_image_despite_its_name_is_named(image_folder) -> None:
    root = image_folder({"rock": 3, "paper": 3})
    (root / "paper" / "fake.jpg").write_text("this is text")
    with pytest.raises(DataError, match=r"paper/fake\.jpg: not a readable image"):
        data.read_dataset(root, seed=12, validation_split=0.2)


def test_limit_keeps_the_first_images_after_the_shuffle(image_folder) -> None:
    root = image_folder({"a": 10, "b": 10, "c": 10})
    full = data.read_dataset(root, seed=12, validation_split=0.2)
    limited = data.read_dataset(root, seed=12, validation_split=0.2, limit=12)
    assert limited.files == full.files[:12]
    assert limited.fingerprint != full.fingerprint


def test_cache_that_would_not_fit_streams_with_a_warning() -> None:
    from gpubench.agent.workload import hostmemory

    b7 = hostmemory.cache_bytes(2136, 600)
    assert b7 == 2136 * 600 * 600 * 3  # 2.3 GB: what cost the article's author a 12 GB machine
    assert hostmemory.cache_refusal(2136, 600, available=12 * 10**9) is None
    warning = hostmemory.cache_refusal(2136, 600, available=4 * 10**9)
    assert warning and "streaming" in warning and "2.1 GiB" in warning
    assert hostmemory.available_memory_bytes() > 0
