"""A language model's pages speak of tokens: the speed in tok/s and the energy in seq/J
in every heading that sorts, the epoch in training sequences, never images or pixels."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import make_run
from live_site import LiveSite, _start

from gpubench import models


def lm_run(gpu_name: str, seconds: float) -> object:
    """GPT2-small as the H200 ran it (docs/results/h200-models): 205 sequences of 1,024
    tokens an epoch, its rate in tokens a second."""
    return make_run(gpu_name=gpu_name, model=models.LM, image_size=0, batch_per_gpu=16,
                    peak_memory_bytes=12 << 30,
                    epoch2_seconds=seconds, train_images_per_second=205 * 1024 / seconds,
                    config__train_images=205, config__unit=models.TOKENS,
                    config__input_spec="tokens 1024 of 50257", config__model_fingerprint="ab" * 32,
                    config__batch_rule="steps",
                    result__step_time_median_seconds=0.0)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    # Two on a catalogued card, one on a card the catalogue lacks.
    runs = [lm_run("NVIDIA H200", s) for s in (5.9, 6.0)]
    runs.append(lm_run("NVIDIA Rubin R100", 4.0))  # like no catalogued name
    tmp: Path = tmp_path_factory.mktemp("language-model")
    for site, address, admin, _ in _start(tmp, runs, public_read=True):
        yield LiveSite(site.url, address, admin, "", "")


def test_the_comparison_of_a_language_model_speaks_of_tokens(site: LiveSite) -> None:
    status, page, _ = site.get(f"/compare/{models.LM}")
    assert status == 200, page
    assert ">tok/s<" in page and ">seq/J<" in page
    assert ">img/s<" not in page and ">img/J<" not in page
    assert "205 training sequences" in page
    assert "training images" not in page and " px " not in page


def test_a_card_the_catalogue_lacks_and_the_runs_list_say_tokens(site: LiveSite) -> None:
    status, page, _ = site.get(f"/compare/{models.LM}")
    assert status == 200, page
    # The table of runs on a card the catalogue lacks gives the rate in the model's unit.
    uncatalogued = page.split('id="uncatalogued"', 1)[1]
    assert "Rubin R100" in uncatalogued and ">tok/s<" in uncatalogued
    # The list of runs, which may mix models, says a language model's rate is in tok/s.
    status, page, _ = site.get(f"/runs?model={models.LM}")
    assert status == 200, page
    assert page.count('data-label="tok/s"') == 3 and 'data-label="img/s"' not in page
