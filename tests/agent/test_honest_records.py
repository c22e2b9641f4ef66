"""The record says what ran: the pipeline as it ran, and an epoch 2 slower than epoch 1
(a throttling card) recorded, explained and accepted by the collector, not refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_agent_cli import agent, agent_env, with_token

from gpubench.agent.assemble import slower_second_epoch
from gpubench.agent.telemetry import WindowTelemetry
from gpubench.client import Client
from gpubench.v1 import run_pb2


def test_a_slower_second_epoch_and_a_streamed_cache_reach_the_collector(
        tmp_path: Path, trace_path: Path, fake_workload_command, collector) -> None:
    # Epoch 1 0.3 s, epoch 2 0.6 s: start-up below 0. The cached pipeline streamed.
    env = agent_env(tmp_path, fake_workload_command, GPUBENCH_NVML_TRACE=str(trace_path),
                    FAKE_WORKLOAD_EPOCH_SECONDS="0.6", FAKE_WORKLOAD_FIRST_EPOCH_SECONDS="0.3",
                    FAKE_WORKLOAD_PIPELINE_MODE="streaming")
    token = collector.make_token("lab")
    done = agent(["run", "--models", "B0", "--batch", "8", "--collector", collector.address],
                 with_token(env, token))
    assert done.returncode == 0, done.stderr
    assert "sent to the collector" in done.stderr and "refused" not in done.stderr
    with Client(collector.address, collector.admin_token) as client:
        [stored] = list(client.iter_runs())
        run = stored.run
        assert (run.config.pipeline, run.config.pipeline_mode) == ("cached", "streaming")
        assert run.result.startup_seconds == pytest.approx(-0.3, abs=0.15)
        [warning] = [w for w in run.result.warnings if "longer than epoch 1" in w]
        assert "start-up -0." in warning
        # Compared as a streaming run: a cached run's flag does not find it.
        assert client.compare("B0", pipeline="cached").empty
        assert len(client.compare("B0", pipeline="streaming")) == 1


def _window(clock: float, reasons: tuple[str, ...] = ()) -> WindowTelemetry:
    return WindowTelemetry(mean_sm_clock_mhz=clock, throttle_reasons=reasons)


def test_the_warning_says_throttling_or_warm_up() -> None:
    result = run_pb2.Result(measured_epoch=2, startup_seconds=-1.5)
    assert slower_second_epoch(result, _window(1980), _window(1700, ("hw_thermal_slowdown",))) \
        == ("epoch 2 took 1.5 s longer than epoch 1 (start-up -1.5 s): the GPU throttled "
            "(hw_thermal_slowdown)")
    assert slower_second_epoch(result, _window(1980), _window(1700)).endswith(
        "the GPU warmed up and slowed, its clock from 1980 to 1700 MHz")
    assert "neither throttling nor a lower clock" in slower_second_epoch(
        result, _window(1980), _window(1975))
