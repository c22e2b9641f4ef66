"""A benchmark run's settings: the one schema of every setting, and the protocol's tables.

Each RunSettings field carries a Setting: its flag, help, choices, lower bound,
the workload commands that take it and the agent commands that offer it. The
workload's and the agent's command-line options (gpubench.settings_cli), the
arguments the agent starts the workload with, each batch trial's command and the
record's switches all come from it: adding a setting is one field here plus its
implementation.

Nothing here imports a framework or the generated wire code: the agent, the
workload (whose image may lack the wire code) and gpubench.record all read it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from gpubench import models, sizes
from gpubench.errors import ExitCode, GpubenchError

# The protocol's values.
MODELS = models.EFFICIENTNETS
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
# How a GPU computes float32 convolutions and matrix products (Config.math_mode;
# docs/protocol.md, "Precision"): "tf32" rounds their inputs to TF32 on the tensor cores
# (JAX's and TensorFlow's default, and torch's for convolutions), "float32" computes them
# in full float32. One default on every backend, so that a float32 run means one thing.
MATH_TF32, MATH_FLOAT32 = "tf32", "float32"
MATH_MODES = (MATH_TF32, MATH_FLOAT32)
# What a run read back where convolutions and matrix products differ (torch's own
# defaults: TF32 convolutions, float32 matrix products); never asked for.
MATH_TF32_CONVOLUTIONS, MATH_TF32_MATMULS = "tf32-convolutions", "tf32-matmuls"
RECORDED_MATH_MODES = (*MATH_MODES, MATH_TF32_CONVOLUTIONS, MATH_TF32_MATMULS)
BACKENDS = ("tensorflow", "torch", "jax")
PIPELINES = ("cached", "seed")
NATIVE_IMAGE_SIZE = {"B0": 224, "B3": 300, "B7": 600}

# Parameter counts model.summary() printed in the protocol (total, trainable, non-trainable).
PROTOCOL_PARAMETERS = {
    "B0": (4_053_414, 4_011_391, 42_023),
    "B3": (10_788_146, 10_700_843, 87_303),
    "B7": (64_105_370, 63_794_643, 310_727),
}

CLASSES = ("paper", "rock", "scissors")
VALIDATION_SPLIT = 0.2
# The fewest images a run may use (--limit-images), and the training images they leave.
MIN_IMAGES = 10
MIN_TRAIN_IMAGES = MIN_IMAGES - int(VALIDATION_SPLIT * MIN_IMAGES)
DEFAULT_SEED = 12  # the protocol's image_dataset_from_directory(seed=12)
DEFAULT_EPOCHS = 2
MEASURED_EPOCH = 2  # the headline: epoch 1 carries start-up
SYNTHETIC = "synthetic"

# How a run's batch is chosen, each rule under one name on the command line and in the
# record (Config.batch_rule; docs/protocol.md): "steps" the largest power of two that fits
# with at least 8 training steps an epoch (--batch steps, the default); "largest" the
# largest that fits (--batch largest); "given" --batch N; "quick" the agent's --quick (B0
# at the article's T4 batch). The one definition: the record, the collector's checks and
# the tables import it.
RULE_STEPS, RULE_LARGEST, RULE_GIVEN, RULE_QUICK = "steps", "largest", "given", "quick"
BATCH_RULES = (RULE_STEPS, RULE_LARGEST, RULE_GIVEN, RULE_QUICK)
# The rules --batch names (the others come with a batch size).
SEARCHED_RULES = (RULE_STEPS, RULE_LARGEST)
# Older spellings --batch still takes, each said to be deprecated: "auto" was the steps
# rule's name on the command line before it had one name everywhere.
DEPRECATED_BATCH_WORDS = {"auto": RULE_STEPS}
QUICK_MODEL, QUICK_BATCH = "B0", 128

# Exit codes of the workload process (the agent maps them to a run status).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_OUT_OF_MEMORY = 3
# The model cannot be fed or built as given: refused before any training, no record.
EXIT_REFUSED = ExitCode.USAGE

# The batch search's defaults.
DEFAULT_MAX_TRIALS = 8
DEFAULT_SEARCH_BUDGET = 120.0  # seconds

# Settings that compute the protocol's network in fewer kernels on torch (on by
# default there, refused on the other backends).
TORCH_KERNELS = ("batched_augmentation", "fused_batchnorm", "channels_first")

# How the agent starts the workload: `python -m WORKLOAD_MODULE COMMAND ...`.
WORKLOAD_MODULE = "gpubench.agent.workload"

# Development hook: cap the run's own address space at this many bytes once training
# starts (never the batch trials'), so that a CPU run genuinely runs out of memory
# (tests of the agent's retry at a smaller batch).
RUN_ADDRESS_SPACE_ENV = "GPUBENCH_RUN_ADDRESS_SPACE"


class BadSettings(GpubenchError):
    """A setting is out of range or not one of its choices; names the flag."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Setting:
    """How one RunSettings field is given: its flag, help and where it is taken.

    Both command lines (the agent's and the workload's), the arguments the agent
    passes to the workload, the batch trials' command and the record's config
    are derived from these, so a new setting is one field here plus what it does.
    """

    flag: str  # "--precision"
    help: str
    off_flag: str = ""  # a switch's other flag, e.g. "--no-jit-compile"
    # "str", "int", "float", "size" (bytes, e.g. 16GiB), "choice" or "batch" (a size, or
    # a rule that chooses it: parse_batch; its field's rule is batch_rule)
    kind: str = "str"
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    # The workload commands that take it: "trial" (each batch trial: the network and
    # how its step runs), "search" (the batch search alone) and "run" (everything).
    commands: frozenset[str] = frozenset({"run"})
    # The agent commands that offer it ("run", "largest-batch"); the workload's default
    # applies where the user gives none.
    agent: frozenset[str] = frozenset()
    agent_default: str = ""  # how the agent's --help states the default
    hidden: bool = False  # for tests and development; not in --help


TRIAL, SEARCH, RUN = frozenset({"trial", "search", "run"}), frozenset({"search", "run"}), \
    frozenset({"run"})
AGENT_RUN, AGENT_BOTH = frozenset({"run"}), frozenset({"run", "largest-batch"})


def _setting(default: Any, **how: Any) -> Any:
    """A RunSettings field with its Setting."""
    return field(default=default, metadata={"setting": Setting(**how)})


@dataclass(frozen=True)
class RunSettings:
    """One benchmark run's settings: the schema of every setting, and their checks."""

    model: str = _setting(
        "B0", flag="--model", commands=TRIAL,
        help="The model to train: the protocol's EfficientNet B0 (224 px), B3 (300 px) or B7 "
             f"(600 px); {models.VIT} (a ViT-B/16 on the photos) or {models.LM} (a decoder "
             "language model of GPT-2 small's shape on synthetic tokens, timed in tokens/s); "
             "a keras.applications architecture by name (e.g. ConvNeXtTiny, no weights); "
             "a .keras file (its architecture); or path/to/file.py:function, a function "
             "that returns the model.")
    batch: int | None = _setting(  # None: chosen from the batch search by batch_rule
        None, flag="--batch", kind="batch", agent=AGENT_RUN, agent_default=RULE_STEPS,
        help="Batch size per GPU. 'steps': search the largest batch that fits (recorded) "
             "and time the largest power of two that fits and leaves at least 8 training "
             "steps an epoch; 'largest': time the largest that fits; N: time N (a run that "
             "runs out of memory then ends so).")
    batch_rule: str = RULE_STEPS  # set with batch by --batch; "given" whenever batch is set
    # None: the model's own (default_precision), settled in __post_init__.
    precision: str = _setting(
        None, flag="--precision", kind="choice", choices=PRECISIONS, commands=TRIAL,
        agent=AGENT_BOTH,
        agent_default=f"float32; mixed_bfloat16 for {models.VIT} and {models.LM}",
        help="Training precision: float32 is the protocol's (the EfficientNets' and any "
             "other model's default); mixed_* keep float32 weights and compute in 16 bits "
             f"(mixed_bfloat16: the default for {models.VIT} and {models.LM}, as "
             "transformers are trained).")
    math_mode: str = _setting(
        MATH_TF32, flag="--math-mode", kind="choice", choices=MATH_MODES, commands=TRIAL,
        agent=AGENT_BOTH, agent_default=MATH_TF32,
        help="How a GPU computes float32 convolutions and matrix products: tf32 (TF32 "
             "tensor cores: JAX's and TensorFlow's default, torch's for convolutions) or "
             "float32 (full float32). The record names the mode that ran; runs compare "
             "only with runs of the same.")
    gpus: int = _setting(
        1, flag="--gpus", kind="int", minimum=0, commands=TRIAL, agent=AGENT_BOTH,
        agent_default="1, or 0 without a GPU",
        help="GPUs to train on, data-parallel (global batch = batch x GPUs); 0 trains on "
             "the CPU.")
    backend: str = _setting(
        "tensorflow", flag="--backend", kind="choice", choices=BACKENDS, commands=TRIAL,
        agent=AGENT_BOTH,
        agent_default="$KERAS_BACKEND, else on a GPU the first of torch, tensorflow, jax "
                      "whose build runs on it; on the CPU tensorflow",
        help="Framework under Keras.")
    data: str = _setting(
        SYNTHETIC, flag="--data", commands=SEARCH, agent=AGENT_RUN,
        help="'synthetic' (generated once into the cache) or a folder with one sub-folder "
             "of PNG/JPEG images per class (the rock-paper-scissors photos).")
    epochs: int = _setting(
        DEFAULT_EPOCHS, flag="--epochs", kind="int", minimum=MEASURED_EPOCH,
        agent=AGENT_RUN, help="Epochs to train; epoch 2 is the measured one.")
    image_size: int | None = _setting(
        None, flag="--image-size", kind="int", minimum=32, commands=TRIAL, agent=AGENT_BOTH,
        agent_default="the model's native size",
        help="Pixels per side fed to the network, overriding the model's native size ("
             + ", ".join(f"{m} {s}" for m, s in NATIVE_IMAGE_SIZE.items())
             + "); for tests and tiny runs.")
    # The agent takes it as --train-images, the training images an epoch that the record
    # and compare count (images_for_training makes one the other).
    limit_images: int | None = _setting(
        None, flag="--limit-images", kind="int", minimum=MIN_IMAGES, commands=SEARCH,
        help="Use only this many images, or samples for a model fed synthetic inputs such "
             "as the language model's sequences (quick checks; compared only with runs of "
             "as many).")
    pipeline: str = _setting(
        "cached", flag="--pipeline", kind="choice", choices=PIPELINES, agent=AGENT_RUN,
        help="cached: decode once and prefetch (measures the GPU); seed: decode every "
             "epoch as the protocol's scripts did.")
    weights: str = _setting(  # "none", "imagenet" or a weights file
        "none", flag="--weights", agent=AGENT_RUN,
        help="Starting weights of the EfficientNet: none, imagenet (Keras's cache or a "
             "download) or a weights file.")
    seed: int = _setting(
        DEFAULT_SEED, flag="--seed", kind="int", commands=TRIAL,
        help="Seed of the train/validation split, the shuffles and the weights' "
             "initialisation (the protocol's split uses 12).")
    # Compile the training step (None: on with JAX, where Keras otherwise runs the network
    # one operation at a time: docs/results/h200-jax.md).
    jit_compile: bool | None = _setting(
        None, flag="--jit-compile", off_flag="--no-jit-compile", commands=TRIAL,
        agent=AGENT_RUN, agent_default="on with jax",
        help="Compile the training step (XLA on TensorFlow and JAX, torch.compile on "
             "torch); the protocol's TensorFlow did not. JAX on a GPU needs it.")
    # Replay each step as a CUDA graph (None: on where it applies: a standard workload,
    # torch on one GPU, float32 or mixed_bfloat16, no jit_compile).
    cuda_graphs: bool | None = _setting(
        None, flag="--cuda-graphs", off_flag="--no-cuda-graphs", commands=TRIAL,
        agent=AGENT_RUN, agent_default="on where it applies",
        help="torch backend, one GPU: record each training and validation step once as a "
             "CUDA graph (one per batch shape) and replay it, so the host launches a step "
             "with one call. Random numbers then come from torch's default generator (the "
             "same distributions, not Keras's sequence); not with mixed_float16 or "
             "--jit-compile.")
    data_on_device: bool = _setting(  # keep the cached images on the GPU (torch backend)
        False, flag="--data-on-device", off_flag="--data-on-host", agent=AGENT_RUN,
        help="torch backend, cached pipeline: keep the decoded images on the GPU and gather "
             "batches there.")
    # The same network in fewer kernels (torch only; None: on with torch, else off).
    batched_augmentation: bool | None = _setting(  # rotation and zoom for the whole batch
        None, flag="--batched-augmentation", off_flag="--keras-augmentation", commands=TRIAL,
        agent=AGENT_RUN, agent_default="on with torch",
        help="torch backend: compute the random rotation and zoom for the whole batch at once "
             "(the same transforms and pixels) instead of Keras's image-by-image loop.")
    fused_batchnorm: bool | None = _setting(  # batch normalization through torch's kernel
        None, flag="--fused-batchnorm", off_flag="--keras-batchnorm", commands=TRIAL,
        agent=AGENT_RUN, agent_default="on with torch",
        help="torch backend: compute batch normalization with torch's fused kernel (the same "
             "normalisation and moving averages) instead of Keras's element-wise float32 "
             "operations.")
    channels_first: bool | None = _setting(  # images laid out (channels, height, width)
        None, flag="--channels-first", off_flag="--channels-last", commands=TRIAL,
        agent=AGENT_RUN, agent_default="channels first with torch",
        help="torch backend: lay the images and every activation out as (channels, height, "
             "width), torch's own order, instead of the protocol's channels last, which "
             "Keras on torch transposes around every convolution.")
    max_trials: int = _setting(
        DEFAULT_MAX_TRIALS, flag="--max-trials", kind="int", minimum=2, commands=SEARCH,
        help="Most batch-size trials a search may run.")
    trial_steps: int = _setting(
        1, flag="--trial-steps", kind="int", minimum=1, commands=TRIAL,
        help="Training steps at its batch each batch-size trial runs.")
    search_budget: float = _setting(  # seconds the batch search may take
        DEFAULT_SEARCH_BUDGET, flag="--search-budget", kind="float", minimum=1,
        commands=SEARCH, agent=AGENT_BOTH,
        help="Seconds the batch search may take per model; it keeps the largest batch "
             "confirmed by then.")
    memory_limit_bytes: int | None = _setting(  # behave as a GPU of this many bytes
        None, flag="--memory-limit", kind="size", commands=TRIAL, agent=AGENT_RUN,
        agent_default="the whole card",
        help="Behave as a GPU of this size, e.g. 16GiB (torch: the allocator's share of "
             "the card; TensorFlow: a logical device limit): would it fit there?")
    trial_address_space: int | None = _setting(  # caps each trial's address space (tests)
        None, flag="--trial-address-space", kind="int", minimum=1, commands=TRIAL,
        hidden=True, help="Cap each batch-size trial's address space (tests of the search).")
    replicas_on_cpu: int = _setting(  # torch data parallelism over CPU processes (tests)
        0, flag="--replicas-on-cpu", kind="int", minimum=0, hidden=True,
        help="torch: data-parallel over this many CPU processes (tests of --gpus N).")

    def __post_init__(self) -> None:
        if self.precision is None:  # frozen: settle the default once, here
            object.__setattr__(self, "precision", default_precision(self.model))
        for name, setting in SETTINGS.items():
            _check(setting, getattr(self, name))
        try:
            models.kind_of(self.model)
        except ValueError as exc:
            said = str(exc)
            raise BadSettings(said if said.startswith("--model") else f"--model {said}") \
                from None
        self._check_own_paths()
        if self.batch is not None and self.batch < 1:
            raise BadSettings(f"--batch must be at least 1, 'steps' or 'largest', not "
                              f"{self.batch}")
        _check_choice("--batch-rule", self.batch_rule, BATCH_RULES)
        if self.batch is not None and self.batch_rule not in (RULE_GIVEN, RULE_QUICK):
            object.__setattr__(self, "batch_rule", RULE_GIVEN)
        if self.batch is None and self.batch_rule not in (RULE_STEPS, RULE_LARGEST):
            raise BadSettings(f"--batch-rule {self.batch_rule} needs a batch size")
        self._check_memory_limit()
        self._check_jit_compile()
        for name in TORCH_KERNELS:
            value = getattr(self, name)
            if value and self.backend != "torch":
                raise BadSettings(f"{SETTINGS[name].flag} needs --backend torch")
            if value is None:  # frozen: settle the default once, here
                object.__setattr__(self, name, self.backend == "torch")
        self._check_cuda_graphs()
        if self.replicas_on_cpu and (self.gpus or self.backend != "torch"):
            raise BadSettings("--replicas-on-cpu needs --gpus 0 and --backend torch")
        if self.data_on_device and (self.pipeline != "cached" or self.backend != "torch"):
            raise BadSettings("--data-on-device needs --pipeline cached and --backend torch")

    def _check_own_paths(self) -> None:
        """Any model but the EfficientNets trains on Keras's own code path: the
        EfficientNets' torch kernels, data kept on the device and starting weights do not
        apply (CUDA graphs do: graphs_apply)."""
        if models.is_efficientnet(self.model):
            return
        for name in (*TORCH_KERNELS, "data_on_device"):
            if getattr(self, name):
                raise BadSettings(f"{SETTINGS[name].flag} applies to the EfficientNets "
                                  f"(B0, B3, B7) only; {self.model} trains on Keras's own "
                                  "code path")
            if getattr(self, name) is None:  # frozen: settle the default once, here
                object.__setattr__(self, name, False)
        if self.weights != "none":
            raise BadSettings(f"--weights applies to the EfficientNets only; {self.model} "
                              "starts from fresh weights")

    def _check_memory_limit(self) -> None:
        if self.memory_limit_bytes is None:
            return
        if self.gpus == 0:
            raise BadSettings("--memory-limit makes a GPU behave as a smaller one: it needs "
                              "--gpus 1 or more")
        if self.backend == "jax":
            raise BadSettings("--memory-limit works with --backend torch or tensorflow")
        if self.memory_limit_bytes < 1 << 30:
            raise BadSettings(f"--memory-limit must be at least 1 GiB, not "
                              f"{self.memory_limit_bytes} bytes")

    def _check_jit_compile(self) -> None:
        if self.jit_compile is None:  # frozen: settle the default once, here
            object.__setattr__(self, "jit_compile", self.backend == "jax")
        if self.backend == "jax" and self.gpus and not self.jit_compile:
            raise BadSettings(JAX_UNCOMPILED)

    def _check_cuda_graphs(self) -> None:
        if self.cuda_graphs is None:  # frozen: settle the default once, here
            object.__setattr__(self, "cuda_graphs", graphs_apply(self))
        if not self.cuda_graphs:
            return
        if self.backend != "torch":
            raise BadSettings("--cuda-graphs needs --backend torch")
        if self.gpus != 1:
            raise BadSettings(f"--cuda-graphs needs --gpus 1 (a CUDA GPU), not {self.gpus}")
        if self.jit_compile:
            raise BadSettings("--cuda-graphs and --jit-compile: choose one")
        if self.precision == "mixed_float16":
            raise BadSettings("--cuda-graphs does not work with --precision mixed_float16: its "
                              "loss scaling reads a flag back to the host every step; use "
                              "mixed_bfloat16 or float32")

    @property
    def size(self) -> int:
        """Pixels per side fed to the network (0 for a model other than the
        EfficientNets without --image-size: the model's own)."""
        return self.image_size or NATIVE_IMAGE_SIZE.get(self.model, 0)

    @property
    def devices(self) -> int:
        """How many replicas train: the GPUs, or the one CPU."""
        return self.replicas_on_cpu or max(1, self.gpus)


# Why JAX on a GPU trains compiled: uncompiled, Keras dispatches and compiles each operation
# of the network from Python, and the GPU mostly waits (measured on an H200).
JAX_UNCOMPILED = (
    "--backend jax --no-jit-compile on a GPU measures Python's dispatch of single operations, "
    "not the GPU (an H200 was busy 3.6% of epoch 2, 40x slower than torch: "
    "docs/results/h200-jax.md); leave --jit-compile on with JAX, or train on the CPU "
    "(--gpus 0)")


def parse_size(text: str) -> int:
    """Bytes of a size such as '16GiB', '16 GB', '8g' (gpubench.sizes.parse_size), or
    BadSettings."""
    try:
        return sizes.parse_size(text)
    except ValueError as exc:
        raise BadSettings(str(exc)) from None


def images_for_training(train_images: int) -> int:
    """The images a run uses (its --limit-images) for `train_images` of them to train each
    epoch: the fewest the workload takes whose split (it holds int(VALIDATION_SPLIT x
    images) out for validation) leaves that many to train on; 2136 for the protocol's 1709.
    Fewer than MIN_TRAIN_IMAGES cannot be asked for."""
    images = max(MIN_IMAGES, int(train_images / (1 - VALIDATION_SPLIT)) - 2)
    while images - int(VALIDATION_SPLIT * images) < train_images:
        images += 1
    return images


def graphs_apply(settings: RunSettings) -> bool:
    """Whether --cuda-graphs is on by default: for the standard workloads (the
    EfficientNets and the built-in transformers, whose steps are known to replay), on
    torch on one GPU, without jit_compile and mixed_float16 (whose loss scaling reads a
    flag back to the host every step). Another model's steps replay only when asked for
    (--cuda-graphs): one that reads a value back to the host cannot be captured."""
    return (models.is_standard(settings.model) and settings.backend == "torch"
            and settings.gpus == 1 and not settings.jit_compile
            and settings.precision != "mixed_float16" and not settings.replicas_on_cpu)


def default_precision(model: str) -> str:
    """The precision `model` is timed in unless --precision says: mixed_bfloat16 for the
    built-in transformers, which are trained so in practice (bf16 tensor cores, float32
    weights and loss); the protocol's float32 for the EfficientNets and any other model
    (a user's own model is timed as it is unless they ask)."""
    return "mixed_bfloat16" if model in models.TRANSFORMERS else "float32"


def math_mode_name(convolutions_tf32: bool, matmuls_tf32: bool) -> str:
    """The record's name of a math mode (Config.math_mode) from whether float32
    convolutions and matrix products use TF32."""
    if convolutions_tf32 == matmuls_tf32:
        return MATH_TF32 if matmuls_tf32 else MATH_FLOAT32
    return MATH_TF32_CONVOLUTIONS if convolutions_tf32 else MATH_TF32_MATMULS


def environment_backend() -> str | None:
    """The backend KERAS_BACKEND names, if it names a supported one; else None."""
    chosen = os.environ.get("KERAS_BACKEND", "").strip().lower()
    return chosen if chosen in BACKENDS else None


def default_backend() -> str:
    """KERAS_BACKEND if it names a supported backend, else TensorFlow (the protocol's)."""
    return environment_backend() or "tensorflow"


def _check_choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise BadSettings(f"{flag} must be one of {', '.join(choices)}, not {value!r}")


# Every setting of the schema, by RunSettings field name, in the order of the fields.
SETTINGS: dict[str, Setting] = {
    spec.name: spec.metadata["setting"] for spec in fields(RunSettings)
    if "setting" in spec.metadata
}


def _check(setting: Setting, value: Any) -> None:
    """A BadSettings naming the flag if `value` is not one of its choices or under its
    lower bound (None: not given)."""
    if value is None or setting.kind == "batch":  # --batch is checked with its rule
        return
    if setting.choices:
        _check_choice(setting.flag, value, setting.choices)
    if setting.minimum is not None and value < setting.minimum:
        raise BadSettings(f"{setting.flag} must be at least {setting.minimum:g}, not {value}")


def taken_by(command: str) -> dict[str, Setting]:
    """The settings a workload command ("run", "trial", "search") takes."""
    return {name: s for name, s in SETTINGS.items() if command in s.commands}


def offered_by_agent(command: str) -> dict[str, Setting]:
    """The settings an agent command ("run", "largest-batch") offers."""
    return {name: s for name, s in SETTINGS.items() if command in s.agent}


def switches() -> tuple[str, ...]:
    """The on/off settings of a run, as the record's config names them."""
    return tuple(name for name, s in SETTINGS.items() if s.off_flag and "run" in s.commands
                 and not s.hidden)


def arguments(command: str, values: Mapping[str, Any]) -> list[str]:
    """The flags that give `values` (field name -> value) to the workload's `command`;
    a value that is None, or a setting the command does not take, is left out (the
    workload's default applies)."""
    given: list[str] = []
    for name, setting in taken_by(command).items():
        value = values.get(name)
        if setting.kind == "batch":
            given += batch_arguments(value, values.get("batch_rule") or RULE_STEPS)
            continue
        if value is None:
            continue
        if setting.off_flag:
            given.append(setting.flag if value else setting.off_flag)
        else:
            given += [setting.flag, str(value)]
    return given


def batch_arguments(batch: int | None, rule: str) -> list[str]:
    """The flags that give the workload's `run` a batch and its rule: --batch N (with the
    hidden --batch-rule quick for the agent's --quick), --batch largest, or nothing for
    the steps rule, the workload's default (so that a workload image older than the
    rule's name, which spelt it auto, runs it too)."""
    if batch is not None:
        return ["--batch", str(batch), *(["--batch-rule", rule] if rule == RULE_QUICK else [])]
    return [] if rule == RULE_STEPS else ["--batch", rule]


def parse_batch(text: str) -> tuple[int | None, str]:
    """--batch: (None, rule) for a rule's name ('steps', 'largest'; the deprecated 'auto'
    is 'steps'), or (N, RULE_GIVEN) for a whole number of at least 1; else BadSettings."""
    text = str(text).strip().lower()
    text = DEPRECATED_BATCH_WORDS.get(text, text)
    if text in SEARCHED_RULES:
        return None, text
    try:
        batch = int(text)
    except ValueError:
        raise BadSettings(f"--batch {text!r}: 'steps', 'largest' or a whole number") from None
    if batch < 1:
        raise BadSettings(f"--batch must be at least 1, not {batch}")
    return batch, RULE_GIVEN
