"""What the agent prints while a model runs: the workload's events as lines."""

from __future__ import annotations

import io

from rich.console import Console

from gpubench.agent.display import RunDisplay
from gpubench.events import EpochFinished, EpochStarted, Event, LogEvent, Step, WarningEvent


def _printed(*events: Event) -> str:
    out = io.StringIO()
    display = RunDisplay(Console(file=out, width=200, color_system=None))
    display.model_started("B0", 2, lambda: None)
    for event in events:
        display.event(event)
    display.model_finished()
    return out.getvalue()


def test_log_warning_and_epoch_lines_are_shown() -> None:
    text = _printed(
        LogEvent(message="CUDA graphs: captured training 512x3x224x224; 6 replays"),
        WarningEvent(message="step times vary by 44%"),
        EpochFinished(epoch=2, wall_seconds=0.48, train_seconds=0.4, validation_seconds=0.08,
                      t_start=0.0, t_end=0.48, steps=4),
        LogEvent(message=""),  # nothing to say: no line
    )
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines == [
        "B0: CUDA graphs: captured training 512x3x224x224; 6 replays",
        "B0: warning: step times vary by 44%",
        "B0 epoch 2: 0.5 s",
    ]


def test_quiet_prints_nothing() -> None:
    out = io.StringIO()
    display = RunDisplay(Console(file=out), quiet=True)
    display.note("anything")
    assert out.getvalue() == ""


def test_a_long_silent_step_is_said_again_where_there_is_no_live_display() -> None:
    import time

    out = io.StringIO()
    display = RunDisplay(Console(file=out, width=200, color_system=None), heartbeat_s=0.2)
    display.model_started("B0", 2, lambda: None)
    for event in (EpochStarted(epoch=1, steps=12), Step(epoch=1, step=3, steps=12)):
        display.event(event)
    time.sleep(0.7)
    display.model_finished()
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert lines and all(line.startswith("B0 epoch 1/2 (set-up), step 3/12: still running, ")
                         and line.endswith(" s since B0 started") for line in lines)
    time.sleep(0.3)
    assert [line for line in out.getvalue().splitlines() if line.strip()] == lines  # no more


def test_a_language_model_is_said_by_what_it_is_fed_never_0_px(make_run) -> None:
    from gpubench import models
    from gpubench.agent.display import fed_with
    from gpubench.agent.summary import standing

    assert fed_with(224, "photos 224x224x3") == "224 px"
    assert fed_with(0, "tokens 1024 of 50257") == "tokens 1024 of 50257"
    lm = make_run(gpu_name="NVIDIA H200", model=models.LM, image_size=0, batch_per_gpu=16,
                  peak_memory_bytes=12 << 30, epoch2_seconds=6.0,
                  train_images_per_second=205 * 1024 / 6.0, config__train_images=205,
                  config__unit=models.TOKENS, config__input_spec="tokens 1024 of 50257",
                  config__model_fingerprint="ab" * 32, result__step_time_median_seconds=0.0)
    said = standing(lm, [])
    assert isinstance(said, str) and "0 px" not in said, said
    assert "tokens 1024 of 50257, 205 training sequences" in said, said
