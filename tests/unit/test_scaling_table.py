"""bench/scaling_table.py: efficiency against linear scaling, from run records."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from factories import make_run

from gpubench import record

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("scaling_table", ROOT / "bench/scaling_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(tmp_path: Path, gpus: int, images_per_second: float, n: int) -> None:
    run = make_run()
    run.config.gpu_count = gpus
    run.config.global_batch = run.config.batch_per_gpu * gpus
    while len(run.gpus) < gpus:
        run.gpus.append(run.gpus[0])
    run.result.train_images_per_second = images_per_second
    (tmp_path / f"{gpus}-{n}.json").write_text(record.to_json(run))


def test_efficiency_against_linear(tmp_path: Path) -> None:
    _write(tmp_path, 1, 100.0, 0)
    _write(tmp_path, 1, 120.0, 1)   # median of the 1-GPU runs: 110
    _write(tmp_path, 2, 198.0, 0)   # 198 / (2 x 110) = 90%
    _write(tmp_path, 4, 330.0, 0)   # 330 / (4 x 110) = 75%
    (tmp_path / "broken.json").write_text("{not json")
    rows = {r["gpus"]: r for r in _module().scaling_rows(_module().load([tmp_path]))}
    assert rows[1]["runs"] == 2 and rows[1]["images_per_s"] == 110.0
    assert rows[1]["efficiency"] == 1.0
    assert abs(rows[2]["efficiency"] - 0.9) < 1e-9
    assert abs(rows[4]["efficiency"] - 0.75) < 1e-9
    table = _module().markdown(list(rows.values()))
    assert "| 90% |" in table and "| 75% |" in table
    assert json.loads(json.dumps(list(rows.values())))  # JSON-ready


def test_settings_keep_unlike_runs_apart() -> None:
    settings_label = _module().settings_label
    assert settings_label({}) == "keras"
    kernels = {"batched_augmentation": True, "fused_batchnorm": True, "channels_first": True}
    assert settings_label(kernels) == "kernels"
    assert settings_label({**kernels, "data_on_device": True}) == "kernels+data-on-device"
    assert settings_label({"fused_batchnorm": True}) == "fused-batchnorm"
    assert (settings_label({**kernels, "data_on_device": True, "cuda_graphs": True})
            == "kernels+data-on-device+cuda-graphs")


def test_the_settings_label_is_the_collectors() -> None:
    # The collector keys Compare by record.settings_label; the table must name settings alike.
    table = _module()
    options = [option for option, _ in record.SETTINGS_OPTIONS]
    seen = set()
    for mask in range(1 << len(options)):
        run = make_run(backend="torch")
        for i, option in enumerate(options):
            setattr(run.config, option, bool(mask >> i & 1))
        config = json.loads(record.to_json(run))["config"]
        label = record.settings_label(run.config)
        assert table.settings_label(config) == label, config
        seen.add(label)
    assert len(seen) == 1 << len(options)
    assert {"keras", "kernels", "kernels+data-on-device", "jit", "fused-batchnorm+jit"} <= seen
