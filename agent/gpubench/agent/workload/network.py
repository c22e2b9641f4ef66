"""The protocol's network as a run's settings compute it, ready to train.

Used by the run and by the batch search's trials alike, so that a trial holds
what the run will hold. Imports Keras (through the modules it calls): import it
only after the backend has been selected.
"""

from __future__ import annotations

from typing import Any

from gpubench.agent.workload import frameworks
from gpubench.settings import RunSettings


def prepare_network(settings: RunSettings, *, weights: str = "none",
                    classes: int = 3) -> tuple[Any, Any]:
    """The protocol's model as `settings` compute it: precision and image layout set,
    built, compiled, torch's kernels in place and its steps as they will run
    (Framework.prepare_steps). Returns the model and the CUDA graphs' statistics
    (None when the steps run eagerly)."""
    from gpubench.agent.workload import model as net

    net.set_precision(settings.precision)
    assert settings.channels_first is not None  # settled by RunSettings.__post_init__
    net.set_data_format(settings.channels_first)
    network = net.build(settings.model, settings.size, weights, classes=classes)
    if settings.jit_compile:
        frameworks.get(settings.backend).allow_compiling(network)
    net.compile_for_training(network, jit_compile=bool(settings.jit_compile))
    _fast_kernels(settings, network)
    graphs = frameworks.get(settings.backend).prepare_steps(
        network, gpus=settings.gpus, cuda_graphs=bool(settings.cuda_graphs))
    return network, graphs


def _fast_kernels(settings: RunSettings, network: Any) -> None:
    """The torch-only replacements that compute the protocol's layers in fewer kernels."""
    if settings.batched_augmentation:
        from gpubench.agent.workload import augment

        augment.batch_affine_transforms(network)
    if settings.fused_batchnorm:
        from gpubench.agent.workload import batchnorm

        batchnorm.fuse_batch_normalization(network)
