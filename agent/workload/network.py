"""The protocol's network as a run's settings compute it, ready to train.

Used by the run and by the batch search's trials alike, so that a trial holds
what the run will hold. Imports Keras (through the modules it calls): import it
only after the backend has been selected.
"""

from __future__ import annotations

from typing import Any

from gpubench.settings import RunSettings


def prepare_network(settings: RunSettings, *, weights: str = "none",
                    classes: int = 3) -> tuple[Any, Any]:
    """The protocol's model as `settings` compute it: precision and image layout set,
    built, compiled, torch's kernels in place and its steps as they will run. Returns
    the model and the CUDA graphs' statistics (None when the steps run eagerly)."""
    from gpubench.agent.workload import model as net

    net.set_precision(settings.precision)
    net.set_data_format(settings.channels_first)
    network = net.build(settings.model, settings.size, weights, classes=classes)
    net.compile_for_training(network, jit_compile=settings.jit_compile)
    _fast_kernels(settings, network)
    return network, _torch_steps(settings, network)


def _torch_steps(settings: RunSettings, network: Any) -> Any:
    """torch on a GPU: keep the host from waiting inside a step (torch_async) and,
    with --cuda-graphs, replay the steps as CUDA graphs. Returns the graphs'
    statistics (cuda_graphs.GraphStats), or None when the steps run eagerly."""
    if settings.backend != "torch" or settings.gpus == 0:
        return None
    from gpubench.agent.workload import torch_async

    torch_async.keep_host_ahead(network)
    if not settings.cuda_graphs:
        return None
    from gpubench.agent.workload import cuda_graphs

    return cuda_graphs.use_cuda_graphs(network)


def _fast_kernels(settings: RunSettings, network: Any) -> None:
    """The torch-only replacements that compute the protocol's layers in fewer kernels."""
    if settings.batched_augmentation:
        from gpubench.agent.workload import augment

        augment.batch_affine_transforms(network)
    if settings.fused_batchnorm:
        from gpubench.agent.workload import batchnorm

        batchnorm.fuse_batch_normalization(network)
