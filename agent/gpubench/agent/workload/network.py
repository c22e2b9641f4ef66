"""The protocol's network as a run's settings compute it, ready to train.

Used by the run and by the batch search's trials alike, so that a trial holds
what the run will hold. Imports Keras (through the modules it calls): import it
only after the backend has been selected.
"""

from __future__ import annotations

from typing import Any

from gpubench import models
from gpubench.agent.workload import frameworks
from gpubench.settings import RunSettings


def prepare_network(settings: RunSettings, *, weights: str = "none",
                    classes: int = 3) -> tuple[Any, Any]:
    """The protocol's model as `settings` compute it: math mode, precision and image
    layout set, built, compiled, torch's kernels in place and its steps as they will run
    (Framework.prepare_steps). Returns the model and the CUDA graphs' statistics
    (None when the steps run eagerly)."""
    from gpubench.agent.workload import model as net

    framework = frameworks.get(settings.backend)
    framework.set_math_mode(settings.math_mode)
    if not models.is_efficientnet(settings.model):
        network = _prepare_other(settings)
        graphs = framework.prepare_steps(network, gpus=settings.gpus,
                                         cuda_graphs=bool(settings.cuda_graphs))
        return network, graphs
    net.set_precision(settings.precision)
    assert settings.channels_first is not None  # settled by RunSettings.__post_init__
    net.set_data_format(settings.channels_first)
    network = net.build(settings.model, settings.size, weights, classes=classes)
    if settings.jit_compile:
        framework.allow_compiling(network)
    net.compile_for_training(network, jit_compile=bool(settings.jit_compile))
    _fast_kernels(settings, network)
    graphs = framework.prepare_steps(
        network, gpus=settings.gpus, cuda_graphs=bool(settings.cuda_graphs))
    return network, graphs


def _prepare_other(settings: RunSettings) -> Any:
    """Any other model (custom.py) on Keras's own code path, compiled and checked: one
    gpubench cannot feed is refused here, before any training. Its feeding is left on
    the model as `gpubench_feeding`, its identity as `gpubench_identity`."""
    from gpubench.agent.workload import custom
    from gpubench.agent.workload import model as net

    net.set_precision(settings.precision)
    net.set_data_format(False)
    network, loss = custom.build(settings)
    feeding = custom.feeding(network, own_loss=loss is not None)
    if settings.jit_compile:
        frameworks.get(settings.backend).allow_compiling(network)
    custom.compile_for_training(network, loss, jit_compile=bool(settings.jit_compile))
    network.gpubench_feeding = feeding
    name = settings.model if models.kind_of(settings.model) in (
        models.BUILT_IN, models.APPLICATION) else network.name
    network.gpubench_identity = {**custom.identity(network, feeding), "name": name}
    return network


def _fast_kernels(settings: RunSettings, network: Any) -> None:
    """The torch-only replacements that compute the protocol's layers in fewer kernels."""
    if settings.batched_augmentation:
        from gpubench.agent.workload import augment

        augment.batch_affine_transforms(network)
    if settings.fused_batchnorm:
        from gpubench.agent.workload import batchnorm

        batchnorm.fuse_batch_normalization(network)
