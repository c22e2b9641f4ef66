"""What a benchmark run is asked to do: the settings and the protocol's tables.

Nothing here imports a framework: the agent and the batch-size search read
these settings without pulling in Keras.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpubench import sizes
from gpubench.errors import ExitCode, GpubenchError

# The protocol's values. They repeat gpubench.record's tuples on purpose: the
# workload runs where the generated wire code may be absent (the GPU image ships
# only the framework), and tests/workload checks that both stay equal.
MODELS = ("B0", "B3", "B7")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
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
DEFAULT_SEED = 12  # the protocol's image_dataset_from_directory(seed=12)
DEFAULT_EPOCHS = 2
MEASURED_EPOCH = 2  # the headline: epoch 1 carries start-up
SYNTHETIC = "synthetic"

# How a run's batch is chosen (the record's Config.batch_rule; docs/protocol.md):
# "steps" the largest power of two that fits with at least 8 training steps an epoch
# (--batch auto, the default); "largest" the largest that fits (--batch largest);
# "given" --batch N; "quick" the agent's --quick (B0 at the article's T4 batch).
RULE_STEPS, RULE_LARGEST, RULE_GIVEN, RULE_QUICK = "steps", "largest", "given", "quick"
BATCH_RULES = (RULE_STEPS, RULE_LARGEST, RULE_GIVEN, RULE_QUICK)
QUICK_MODEL, QUICK_BATCH = "B0", 128

# Exit codes of the workload process (the agent maps them to a run status).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_OUT_OF_MEMORY = 3


# Settings that compute the protocol's network in fewer kernels on torch:
# (the flag that turns one on, the flag that turns it off, the RunSettings field).
TORCH_KERNELS = (
    ("--batched-augmentation", "--keras-augmentation", "batched_augmentation"),
    ("--fused-batchnorm", "--keras-batchnorm", "fused_batchnorm"),
    ("--channels-first", "--channels-last", "channels_first"),
)


# How the training step is run, for a run and for each batch-size trial alike:
# (the flag that turns it on, the flag that turns it off, the RunSettings field).
STEP_SWITCHES = (
    ("--jit-compile", "--no-jit-compile", "jit_compile"),
    ("--cuda-graphs", "--no-cuda-graphs", "cuda_graphs"),
)


# Development hook: cap the run's own address space at this many bytes once training
# starts (never the batch trials'), so that a CPU run genuinely runs out of memory
# (tests of the agent's retry at a smaller batch).
RUN_ADDRESS_SPACE_ENV = "GPUBENCH_RUN_ADDRESS_SPACE"


class BadSettings(GpubenchError):
    """A setting is out of range or not one of its choices; names the flag."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class RunSettings:
    """One benchmark run's settings, as given on the command line."""

    model: str = "B0"
    batch: int | None = None  # None: chosen from the batch search by batch_rule
    batch_rule: str = RULE_STEPS  # "given" whenever batch is set
    precision: str = "float32"
    gpus: int = 1
    backend: str = "tensorflow"
    data: str = SYNTHETIC  # "synthetic" or a folder with one sub-folder per class
    epochs: int = DEFAULT_EPOCHS
    image_size: int | None = None  # None: the model's native size
    limit_images: int | None = None
    pipeline: str = "cached"
    weights: str = "none"  # "none", "imagenet" or a weights file
    seed: int = DEFAULT_SEED
    jit_compile: bool = False
    # Replay each step as a CUDA graph (None: on where it applies: torch on one GPU,
    # float32 or mixed_bfloat16, no jit_compile).
    cuda_graphs: bool | None = None
    data_on_device: bool = False  # keep the cached images on the GPU (torch backend)
    # The same network in fewer kernels (torch only; None: on with torch, else off).
    batched_augmentation: bool | None = None  # rotation and zoom for the whole batch at once
    fused_batchnorm: bool | None = None  # batch normalization through torch's fused kernel
    channels_first: bool | None = None  # images laid out (channels, height, width)
    max_trials: int = 8
    trial_steps: int = 1
    search_budget: float = 120.0  # seconds the batch search may take
    memory_limit_bytes: int | None = None  # behave as a GPU of this many bytes
    trial_address_space: int | None = None  # caps each trial's address space (tests)
    replicas_on_cpu: int = 0  # torch data parallelism over CPU processes (tests)

    def __post_init__(self) -> None:
        _check_choice("--model", self.model, MODELS)
        _check_choice("--precision", self.precision, PRECISIONS)
        _check_choice("--backend", self.backend, BACKENDS)
        _check_choice("--pipeline", self.pipeline, PIPELINES)
        if self.batch is not None and self.batch < 1:
            raise BadSettings(f"--batch must be at least 1, 'auto' or 'largest', not {self.batch}")
        _check_choice("--batch-rule", self.batch_rule, BATCH_RULES)
        if self.batch is not None and self.batch_rule not in (RULE_GIVEN, RULE_QUICK):
            object.__setattr__(self, "batch_rule", RULE_GIVEN)
        if self.batch is None and self.batch_rule not in (RULE_STEPS, RULE_LARGEST):
            raise BadSettings(f"--batch-rule {self.batch_rule} needs a batch size")
        if self.search_budget <= 0:
            raise BadSettings(f"--search-budget must be above 0 s, not {self.search_budget}")
        self._check_memory_limit()
        if self.gpus < 0:
            raise BadSettings(f"--gpus must be 0 (CPU) or more, not {self.gpus}")
        if self.epochs < MEASURED_EPOCH:
            raise BadSettings(f"--epochs must be at least {MEASURED_EPOCH}, not {self.epochs}")
        if self.image_size is not None and self.image_size < 32:
            raise BadSettings(f"--image-size must be at least 32 pixels, not {self.image_size}")
        if self.limit_images is not None and self.limit_images < 10:
            raise BadSettings(f"--limit-images must be at least 10, not {self.limit_images}")
        if self.max_trials < 2:
            raise BadSettings(f"--max-trials must be at least 2, not {self.max_trials}")
        if self.trial_steps < 1:
            raise BadSettings(f"--trial-steps must be at least 1, not {self.trial_steps}")
        for flag, _, name in TORCH_KERNELS:
            value = getattr(self, name)
            if value and self.backend != "torch":
                raise BadSettings(f"{flag} needs --backend torch")
            if value is None:  # frozen: settle the default once, here
                object.__setattr__(self, name, self.backend == "torch")
        self._check_cuda_graphs()
        if self.replicas_on_cpu and (self.gpus or self.backend != "torch"):
            raise BadSettings("--replicas-on-cpu needs --gpus 0 and --backend torch")
        if self.data_on_device and (self.pipeline != "cached" or self.backend != "torch"):
            raise BadSettings("--data-on-device needs --pipeline cached and --backend torch")

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
        """Pixels per side fed to the network."""
        return self.image_size or NATIVE_IMAGE_SIZE[self.model]

    @property
    def devices(self) -> int:
        """How many replicas train: the GPUs, or the one CPU."""
        return self.replicas_on_cpu or max(1, self.gpus)


def parse_size(text: str) -> int:
    """Bytes of a size such as '16GiB', '16 GB', '8g' (gpubench.sizes.parse_size), or
    BadSettings."""
    try:
        return sizes.parse_size(text)
    except ValueError as exc:
        raise BadSettings(str(exc)) from None


def graphs_apply(settings: RunSettings) -> bool:
    """Whether --cuda-graphs is on by default: torch on one GPU, without jit_compile and
    mixed_float16 (whose loss scaling reads a flag back to the host every step)."""
    return (settings.backend == "torch" and settings.gpus == 1 and not settings.jit_compile
            and settings.precision != "mixed_float16" and not settings.replicas_on_cpu)


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
