"""The run settings: one schema, validation naming the flag, both command lines and the
workload's arguments derived from it."""

from __future__ import annotations

import sys

import pytest

from gpubench import settings as options
from gpubench.errors import ExitCode
from gpubench.settings import BadSettings, RunSettings


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"epochs": 1}, "--epochs"),
        ({"model": "B5"}, "--model"),
        ({"batch": 0}, "--batch"),
        ({"precision": "float16"}, "--precision"),
        ({"image_size": 8}, "--image-size"),
        ({"pipeline": "seed", "data_on_device": True}, "--data-on-device"),
        ({"cuda_graphs": True}, "--cuda-graphs needs --backend torch"),
        ({"cuda_graphs": True, "backend": "torch", "gpus": 0}, "--cuda-graphs needs --gpus 1"),
        ({"cuda_graphs": True, "backend": "torch", "gpus": 2}, "--cuda-graphs needs --gpus 1"),
        ({"cuda_graphs": True, "backend": "torch", "jit_compile": True}, "--jit-compile"),
        ({"cuda_graphs": True, "backend": "torch", "precision": "mixed_float16"},
         "mixed_float16"),
        ({"backend": "jax", "jit_compile": False}, "--no-jit-compile on a GPU"),
    ],
)
def test_bad_settings_name_their_flag(change: dict, flag: str) -> None:
    with pytest.raises(BadSettings, match=flag) as caught:
        RunSettings(**change)
    assert caught.value.exit_code == ExitCode.USAGE


def test_cuda_graphs_on_one_gpu_with_torch() -> None:
    assert RunSettings(backend="torch", cuda_graphs=True, precision="mixed_bfloat16").cuda_graphs
    # On by default where it applies: torch on one GPU, no jit, not mixed_float16.
    assert RunSettings(backend="torch").cuda_graphs
    assert RunSettings(backend="torch", precision="mixed_bfloat16").cuda_graphs
    for off in ({"gpus": 0}, {"gpus": 2}, {"jit_compile": True},
                {"precision": "mixed_float16"}, {"gpus": 0, "replicas_on_cpu": 2}):
        assert not RunSettings(backend="torch", **off).cuda_graphs, off
    assert not RunSettings(backend="tensorflow").cuda_graphs
    assert not RunSettings(backend="torch", cuda_graphs=False).cuda_graphs


def test_jax_compiles_its_training_step_by_default() -> None:
    assert RunSettings(backend="jax").jit_compile
    assert RunSettings(backend="jax", gpus=0).jit_compile
    # Uncompiled JAX is refused on a GPU (it measures Python's dispatch), kept on the CPU.
    assert not RunSettings(backend="jax", gpus=0, jit_compile=False).jit_compile
    with pytest.raises(BadSettings, match="h200-jax.md"):
        RunSettings(backend="jax", gpus=2, jit_compile=False)
    for backend in ("torch", "tensorflow"):
        assert not RunSettings(backend=backend).jit_compile, backend
        assert RunSettings(backend=backend, jit_compile=True, cuda_graphs=False).jit_compile


def test_the_batch_rule_follows_the_batch() -> None:
    assert RunSettings().batch_rule == "steps"
    assert RunSettings(batch_rule="largest").batch_rule == "largest"
    assert RunSettings(batch=64).batch_rule == "given"
    assert RunSettings(batch=128, batch_rule="quick").batch_rule == "quick"
    with pytest.raises(BadSettings, match="--batch-rule quick needs a batch size"):
        RunSettings(batch_rule="quick")


def test_memory_limit_is_for_gpus_on_torch_and_tensorflow() -> None:
    assert RunSettings(backend="torch", memory_limit_bytes=16 << 30).memory_limit_bytes
    with pytest.raises(BadSettings, match="needs --gpus 1 or more"):
        RunSettings(backend="torch", gpus=0, memory_limit_bytes=16 << 30)
    with pytest.raises(BadSettings, match="torch or tensorflow"):
        RunSettings(backend="jax", memory_limit_bytes=16 << 30)
    with pytest.raises(BadSettings, match="at least 1 GiB"):
        RunSettings(backend="torch", memory_limit_bytes=1000)


@pytest.mark.parametrize(("text", "size"), [
    ("16GiB", 16 << 30), ("16 GB", 16 * 10**9), ("8g", 8 << 30), ("12000MiB", 12000 << 20),
    ("1.5GiB", 3 << 29), ("17179869184", 16 << 30),
])
def test_sizes(text: str, size: int) -> None:
    assert options.parse_size(text) == size


def test_a_bad_size_says_how_to_write_one() -> None:
    with pytest.raises(BadSettings, match="write e.g. 16GiB"):
        options.parse_size("16 bananas")


def test_native_size_unless_overridden() -> None:
    assert RunSettings(model="B7").size == 600
    assert RunSettings(model="B7", image_size=64).size == 64
    assert RunSettings(gpus=0).devices == 1 and RunSettings(gpus=2).devices == 2


def test_settings_and_search_import_no_framework() -> None:
    import subprocess

    code = (
        "import sys\n"
        "import gpubench.agent.workload, gpubench.settings\n"
        "import gpubench.agent.workload.batch_search, gpubench.agent.workload.cli\n"
        "loaded = [m for m in ('keras', 'tensorflow', 'torch', 'jax') if m in sys.modules]\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


# A value other than the default for every setting, valid together (torch, one GPU).
CHANGED = {
    "model": "B3", "batch": 64, "precision": "mixed_bfloat16", "math_mode": "float32",
    "gpus": 1, "backend": "torch",
    "data": "/data/rps", "epochs": 3, "image_size": 64, "limit_images": 100,
    "pipeline": "cached", "weights": "imagenet", "seed": 7, "jit_compile": False,
    "cuda_graphs": False, "data_on_device": True, "batched_augmentation": False,
    "fused_batchnorm": False, "channels_first": False, "max_trials": 5, "trial_steps": 3,
    "search_budget": 30.0, "memory_limit_bytes": 16 << 30, "trial_address_space": 1 << 34,
    "replicas_on_cpu": 0,
}


def test_every_setting_is_in_the_example() -> None:
    assert set(CHANGED) == set(options.SETTINGS)


@pytest.mark.parametrize("command", ["run", "trial", "search"])
def test_the_workload_reads_back_what_the_arguments_give(command: str) -> None:
    # The arguments the agent (and each batch trial) derive from the schema are parsed
    # by the workload's own command line into the same settings.
    from gpubench.agent.workload import cli

    taken = options.taken_by(command)
    given = {name: value for name, value in CHANGED.items() if name in taken}
    extra = {"trial": ["--batch", "8"]}.get(command, [])
    context = cli.main.commands[command].make_context(
        command, [*extra, *options.arguments(command, given)])
    for name, value in given.items():
        read = context.params[name]
        if options.SETTINGS[name].kind == "batch":  # --batch gives the size and its rule
            read, rule = read
            assert rule == "given"
        assert read == value, name
    assert set(context.params) >= set(taken)


def test_a_trial_takes_what_shapes_the_network_and_its_step() -> None:
    assert set(options.taken_by("trial")) == {
        "model", "precision", "math_mode", "gpus", "backend", "image_size", "seed",
        "jit_compile", "cuda_graphs", "batched_augmentation", "fused_batchnorm", "channels_first",
        "trial_steps", "memory_limit_bytes", "trial_address_space"}
    # None is the workload's default: not passed.
    assert options.arguments("trial", {"model": "B0", "image_size": None}) == ["--model", "B0"]


@pytest.mark.parametrize("command", ["run", "largest-batch"])
def test_the_agent_offers_each_of_its_settings_once(command: str) -> None:
    from gpubench.agent import cli

    agent_command = cli.main.commands[command]
    flags = [flag for param in agent_command.params for flag in param.opts]
    for name, setting in options.offered_by_agent(command).items():
        assert flags.count(setting.flag) == 1, name
        param = next(p for p in agent_command.params if p.name == name)
        assert param.default is None  # the workload's default unless given
        assert "[default: " in (param.help or "")


def test_the_workload_defaults_are_the_schema_s() -> None:
    from gpubench.agent.workload import cli
    from gpubench.settings_cli import as_fields

    context = cli.main.commands["run"].make_context("run", [])
    settings = RunSettings(**as_fields({name: context.params[name]
                                        for name in options.taken_by("run")}))
    assert settings == RunSettings(backend=options.default_backend())


@pytest.mark.parametrize(("text", "parsed"), [
    ("steps", (None, "steps")), ("largest", (None, "largest")), (" 64 ", (64, "given")),
    ("auto", (None, "steps")),  # the steps rule's deprecated name
])
def test_batch_sizes(text: str, parsed: tuple) -> None:
    assert options.parse_batch(text) == parsed


def test_a_batch_rule_has_one_name_on_the_command_line_and_in_the_record() -> None:
    # Each rule --batch names is the record's Config.batch_rule, spelt the same.
    for rule in options.SEARCHED_RULES:
        assert rule in options.BATCH_RULES
        assert options.parse_batch(rule) == (None, rule)
    assert set(options.DEPRECATED_BATCH_WORDS.values()) <= set(options.SEARCHED_RULES)


@pytest.mark.parametrize(("batch", "rule", "flags"), [
    (None, "steps", []),  # the workload's default: an older image spelt it auto
    (None, "largest", ["--batch", "largest"]),
    (64, "given", ["--batch", "64"]),
    (128, "quick", ["--batch", "128", "--batch-rule", "quick"]),
])
def test_the_batch_reaches_the_workload_as_the_schema_says(batch, rule, flags) -> None:
    from gpubench.agent.workload import cli

    arguments = options.arguments("run", {"batch": batch, "batch_rule": rule})
    assert arguments == flags
    context = cli.main.commands["run"].make_context("run", arguments)
    assert context.params["batch"] == (batch, "given" if rule == "quick" else rule)
    assert context.params["batch_rule"] == (rule if rule == "quick" else None)


def test_the_deprecated_batch_word_still_runs_and_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    from gpubench.agent import cli

    command = cli.main.commands["run"]
    assert command.make_context("run", ["--batch", "auto"]).params["batch"] == (None, "steps")
    assert "--batch auto is deprecated: it is --batch steps now" in capsys.readouterr().err
    assert command.make_context("run", ["--batch", "steps"]).params["batch"] == (None, "steps")
    assert command.make_context("run", []).params["batch"] is None  # the workload's default
    assert "deprecated" not in capsys.readouterr().err


def test_the_transformers_are_timed_in_bf16_unless_asked_and_the_rest_in_float32() -> None:
    assert RunSettings(model="GPT2-small").precision == "mixed_bfloat16"
    assert RunSettings(model="ViT-B16").precision == "mixed_bfloat16"
    assert RunSettings(model="ViT-B16", precision="float32").precision == "float32"
    assert RunSettings(model="B0").precision == "float32"
    assert RunSettings(model="ConvNeXtTiny").precision == "float32"


def test_one_math_mode_by_default_and_its_names_as_recorded() -> None:
    assert RunSettings().math_mode == "tf32"
    with pytest.raises(BadSettings, match="--math-mode must be one of tf32, float32"):
        RunSettings(math_mode="highest")
    assert [options.math_mode_name(convolutions, matmuls) for convolutions, matmuls in
            ((True, True), (False, False), (True, False), (False, True))] == [
        "tf32", "float32", "tf32-convolutions", "tf32-matmuls"]


def test_the_built_in_transformers_replay_cuda_graphs_and_other_models_when_asked() -> None:
    assert RunSettings(model="GPT2-small", backend="torch").cuda_graphs
    assert RunSettings(model="ViT-B16", backend="torch").cuda_graphs
    assert not RunSettings(model="ConvNeXtTiny", backend="torch").cuda_graphs
    assert RunSettings(model="ConvNeXtTiny", backend="torch", cuda_graphs=True).cuda_graphs
    assert not RunSettings(model="GPT2-small", backend="torch",
                           precision="mixed_float16").cuda_graphs


def test_every_settings_label_gives_the_switches_that_record_it() -> None:
    """--settings LABEL reads the record's own labels (record.settings_label): each gives
    switches whose label is itself, in any order of its options."""
    from gpubench import record
    from gpubench.settings_cli import label_of, label_switches

    assert len(record.SETTINGS_LABELS) == 1 << len(record.SETTINGS_OPTIONS)
    for label in record.SETTINGS_LABELS:
        assert label_of(label_switches(label)) == label
        assert label_switches("+".join(reversed(label.split("+"))).upper()) == \
            label_switches(label)
    assert label_switches("keras") == dict.fromkeys(options.switches(), False)


@pytest.mark.parametrize(("model", "backend", "gpus", "label"), [
    ("B0", "torch", 1, "kernels+cuda-graphs"), ("B0", "tensorflow", 1, "keras"),
    ("B0", "jax", 0, "jit"), ("ViT-B16", "torch", 1, "cuda-graphs"),
])
def test_the_default_settings_label_is_what_the_help_says(model, backend, gpus, label) -> None:
    from gpubench.settings_cli import LABEL_HELP, settings_label

    assert settings_label({"backend": backend, "gpus": gpus}, model) == label
    assert label in LABEL_HELP


@pytest.mark.parametrize("train", [options.MIN_TRAIN_IMAGES, 9, 31, 32, 192, 1709, 10**6])
def test_train_images_become_the_fewest_images_that_train_so_many(train: int) -> None:
    images = options.images_for_training(train)
    trained = images - int(options.VALIDATION_SPLIT * images)  # as the workload splits
    assert trained == train and images >= options.MIN_IMAGES
    fewer = images - 1
    assert fewer < options.MIN_IMAGES or fewer - int(options.VALIDATION_SPLIT * fewer) < train
    assert options.images_for_training(1709) == 2136  # the protocol's whole set
