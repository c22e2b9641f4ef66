"""On a host with an NVIDIA GPU and torch: `--cuda-graphs` (gpubench.agent.workload.cuda_graphs).

A replayed step must compute what Keras's own step computes (weights, batch-norm
moving averages, optimizer state and metrics, step after step), draw fresh random
numbers on every replay, and run the protocol's model through fit with the second
epoch replayed only. Each test runs in a child process so that the torch backend
is chosen before Keras is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("keras")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU for torch"),
]


def run_torch(code: str) -> dict:
    """Run `code` with Keras on torch in a child process; it prints one JSON line."""
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_replayed_steps_compute_what_keras_computes() -> None:
    found = run_torch("""
        import json
        import keras, numpy as np, torch
        from gpubench.agent.workload import cuda_graphs, torch_async

        def model():
            keras.utils.set_random_seed(3)
            inputs = keras.Input((16, 16, 3))
            x = keras.layers.Conv2D(8, 3, activation="swish")(inputs)
            x = keras.layers.BatchNormalization()(x)
            x = keras.layers.GlobalAveragePooling2D()(x)
            net = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x))
            net.compile(optimizer=keras.optimizers.Adam(1e-3),
                        loss="categorical_crossentropy", metrics=["accuracy"])
            torch_async.keep_host_ahead(net)
            return net

        rng = np.random.default_rng(0)
        batches = [(torch.tensor(rng.normal(size=(n, 16, 16, 3)), dtype=torch.float32,
                                 device="cuda"),
                    torch.tensor(np.eye(3)[rng.integers(0, 3, n)], dtype=torch.float32,
                                 device="cuda"))
                   for n in (32, 32, 32, 8, 32, 32, 8)]
        eager, graphed = model(), model()
        stats = cuda_graphs.use_cuda_graphs(graphed)
        for x, y in batches:
            want = eager.train_on_batch(x, y, return_dict=True)
            got = graphed.train_on_batch(x, y, return_dict=True)
        test_want = eager.test_on_batch(*batches[0], return_dict=True)
        test_got = graphed.test_on_batch(*batches[0], return_dict=True)
        worst = max(float(np.max(np.abs(a - b)))
                    for a, b in zip(eager.get_weights(), graphed.get_weights()))
        optimizer = max(float((a.value - b.value).abs().max())
                        for a, b in zip(eager.optimizer.variables, graphed.optimizer.variables))
        print(json.dumps({"weights": worst, "optimizer": optimizer,
                          "logs": [want, got], "test": [test_want, test_got],
                          "captured": stats.captured, "replays": stats.replays,
                          "eager": stats.eager_steps}))
    """)
    assert found["captured"] == ["training 32x16x16x3", "training 8x16x16x3",
                                 "validation 32x16x16x3"]
    assert found["eager"] == 1 and found["replays"] == 7
    assert found["weights"] < 1e-5 and found["optimizer"] < 1e-5
    for want, got in (found["logs"], found["test"]):
        assert got == pytest.approx(want, abs=1e-5)


def test_every_replay_draws_new_random_numbers() -> None:
    found = run_torch("""
        import json
        import keras, torch
        from gpubench.agent.workload import cuda_graphs, torch_async

        keras.utils.set_random_seed(12)
        inputs = keras.Input((8,))
        hidden = keras.layers.Dropout(0.5)(inputs)  # active in training steps only
        net = keras.Model(inputs, keras.layers.Dense(1)(hidden))
        # Adam, the protocol's optimizer, at a learning rate of 0: the weights stay put.
        net.compile(optimizer=keras.optimizers.Adam(0.0), loss="mse")
        torch_async.keep_host_ahead(net)
        stats = cuda_graphs.use_cuda_graphs(net)
        ones = torch.ones((64, 8), device="cuda")
        target = torch.rand((64, 1), device="cuda")
        losses = [net.train_on_batch(ones, target) for _ in range(5)]
        print(json.dumps({"losses": losses, "captured": stats.captured,
                          "replays": stats.replays, "eager": stats.eager_steps}))
    """)
    assert found["captured"] == ["training 64x8"]
    assert found["eager"] == 1 and found["replays"] == 4
    losses = found["losses"]
    assert len(set(losses)) == len(losses), losses  # a new dropout mask on every step


def test_protocol_model_epoch_two_replays_only(tmp_path) -> None:
    command = [sys.executable, "-m", "gpubench.agent.workload", "run", "--model", "B0",
               "--backend", "torch", "--batch", "32", "--limit-images", "100",
               "--image-size", "64", "--precision", "mixed_bfloat16", "--cuda-graphs"]
    env = {**os.environ, "KERAS_BACKEND": "torch", "GPUBENCH_CACHE": str(tmp_path)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    started = next(e for e in events if e["event"] == "started")
    assert started["cuda_graphs"] is True
    logs = [e["message"] for e in events if e["event"] == "log"]
    (graphs,) = [m for m in logs if m.startswith("CUDA graphs:")]
    # 80 training images at 32: 32, 32, 16; 20 validation images: one shape more.
    assert "training 32x" in graphs and "training 16x" in graphs and "validation 20x" in graphs
    result = next(e for e in events if e["event"] == "result")
    assert [e["wall_seconds"] > 0 for e in events if e["event"] == "epoch_finished"] == [True] * 2
    assert any("whole run" in note for note in result["memory_notes"])
