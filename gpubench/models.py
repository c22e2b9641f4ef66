"""The models gpubench trains, by how `--model` names them, and the unit of each one's speed.

- The protocol's EfficientNets: B0, B3, B7 (gpubench.settings.MODELS).
- Two transformer workloads built into the project from Keras layers
  (gpubench.agent.workload.transformers): a ViT-B/16 on the protocol's photos and a
  decoder-only language model of GPT-2 small's shape on synthetic tokens.
- Any keras.applications architecture by name ("ConvNeXtTiny"), without weights.
- A model file ("path/model.keras"): its architecture.
- A Python function that builds the model ("path/file.py:build").

The standard workloads are the EfficientNets and the built-in transformers: the
leaderboards list them. A user's own model (an application, a file, a function) is
told apart by its fingerprint (the SHA-256 of its architecture's configuration), never
by its architecture, which stays on the host.

Standard library only: the agent, the workload, the collector and the CLI read it.
"""

from __future__ import annotations

import math
import re

EFFICIENTNETS = ("B0", "B3", "B7")
VIT, LM = "ViT-B16", "GPT2-small"
TRANSFORMERS = (VIT, LM)
# The standard workloads, in the order the leaderboards list them.
STANDARD_MODELS = EFFICIENTNETS + TRANSFORMERS

# What a workload's speed counts (Config.unit): images, or tokens for a language model.
IMAGES, TOKENS = "images", "tokens"
UNITS = (IMAGES, TOKENS)
UNIT_OF = {VIT: IMAGES, LM: TOKENS}

# The language model's shape (GPT-2 small's, its output head untied from the embedding).
LM_LAYERS, LM_WIDTH, LM_HEADS, LM_TOKENS, LM_VOCABULARY = 12, 768, 12, 1024, 50_257
# The ViT's input side (16 px patches).
VIT_IMAGE_SIZE = 224
# The built-in transformers' image sizes in the standard benchmark (0: not images).
STANDARD_IMAGE_SIZE = {VIT: VIT_IMAGE_SIZE, LM: 0}

# How the record names a custom model: letters, digits and . _ - (at most 64).
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")
_FUNCTION = re.compile(r".+\.py:[A-Za-z_][A-Za-z0-9_]*")
_FINGERPRINT = re.compile(r"[0-9a-f]{8,64}")

# The kinds of model --model names.
EFFICIENTNET, BUILT_IN, APPLICATION, FILE, FUNCTION = (
    "efficientnet", "built-in", "application", "file", "function")


def kind_of(model: str) -> str:
    """Which kind of model `model` names (the --model text), or ValueError saying what
    --model takes."""
    if model in EFFICIENTNETS:
        return EFFICIENTNET
    if model in TRANSFORMERS:
        return BUILT_IN
    if is_missing_efficientnet(model):
        raise ValueError(missing_efficientnet(model))
    if model.endswith(".keras"):
        return FILE
    if _FUNCTION.fullmatch(model):
        return FUNCTION
    if _NAME.fullmatch(model) and "." not in model:
        return APPLICATION
    raise ValueError(
        f"--model {model!r}: give B0, B3, B7, {VIT}, {LM}, a keras.applications "
        "architecture (e.g. ConvNeXtTiny), a .keras file or path/to/file.py:function")


def is_missing_efficientnet(text: str) -> bool:
    """Whether `text` names an EfficientNet the protocol does not have (b9, B5)."""
    return bool(re.fullmatch(r"[Bb]\d", text)) and text.upper() not in EFFICIENTNETS


def missing_efficientnet(text: str) -> str:
    """Why `text` (is_missing_efficientnet) is refused, in the protocol's names."""
    return (f"{text!r} is not one of {', '.join(EFFICIENTNETS)} (another EfficientNet by its "
            "keras.applications name, e.g. EfficientNetB5)")


def is_efficientnet(model: str) -> bool:
    """Whether `model` is one of the protocol's EfficientNets (its own fast paths apply)."""
    return model in EFFICIENTNETS


def is_standard(model: str) -> bool:
    """Whether `model` is a standard workload (the leaderboards list it)."""
    return model in STANDARD_MODELS


def unit_of(model: str, recorded: str = "") -> str:
    """The unit of a model's speed: the record's Config.unit where it says, else images."""
    return recorded or UNIT_OF.get(model, IMAGES)


def per_sample(unit: str, input_spec: str) -> int:
    """What one sample counts in `unit`, from the record's input spec: a language model's
    tokens a sequence ("tokens 1024 of 50257": 1024), else 1 (an image or a sample). 0 for
    a tokens spec it cannot read."""
    if unit != TOKENS:
        return 1
    found = re.fullmatch(r"tokens ([0-9x]+) of [0-9]+", input_spec.strip())
    if not found:
        return 0
    return math.prod(int(d) for d in found.group(1).split("x") if d)


def is_fingerprint(text: str) -> bool:
    """Whether `text` reads as a model fingerprint (or its first 8+ hex digits) rather than
    a model's name."""
    return bool(_FINGERPRINT.fullmatch(text)) and not text.isdigit()


def record_name(text: str) -> str:
    """A custom model's name as the record carries it: `text` with anything but letters,
    digits and . _ - replaced, at most 64 characters, starting with a letter."""
    name = re.sub(r"[^A-Za-z0-9_.\-]", "_", text)[:64]
    return name if name[:1].isalpha() else ("m" + name)[:64]


def is_record_name(text: str) -> bool:
    """Whether `text` is a model name a record may carry (the collector's check): a
    standard workload's, or another model's that is not an EfficientNet's we lack (B5)."""
    return is_standard(text) or (bool(_NAME.fullmatch(text))
                                 and not is_missing_efficientnet(text))
