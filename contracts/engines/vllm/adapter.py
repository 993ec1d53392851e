"""vLLM (its CPU build) behind the one adapter skeleton (``contracts.engines.inprocess.InProcess``): the eight
observations every engine answers, each from vLLM's own code, on the model runner ``runner`` names (None: the one a
GPU deployment of this release takes by default). vLLM builds the draft against its target's config."""

from __future__ import annotations


def info() -> dict:
    from contracts.engines.vllm.context import engine_version, import_vllm

    import_vllm()
    return {"name": "vllm", "version": engine_version()}


def preload() -> None:
    from contracts.engines.vllm.context import preload

    preload()


def path(engine_dir, target_dir, runner=None):
    from contracts.engines.vllm.runners import observe_path

    return observe_path(engine_dir, target_dir, runner)


def load(engine_dir, target_dir=None, runner=None):
    from contracts.engines.vllm.loader import observe_load

    return observe_load(engine_dir, target_dir, runner=runner)


def aux(engine_dir, target_dir, trainer_hf_indices, runner=None):
    from contracts.engines.vllm.aux_capture import observe_aux_capture

    return observe_aux_capture(engine_dir, target_dir, trainer_hf_indices=trainer_hf_indices, runner=runner)


def config(engine_dir, trained_config, switches, target_config):
    from contracts.engines.vllm.config_probe import observe_config

    return observe_config(engine_dir, trained_config, switches, target_config)


def embed_head(engine_dir, target_dir, runner=None):
    from contracts.engines.vllm.wiring import observe_embed_head

    return observe_embed_head(engine_dir, target_dir, runner)


def forward(engine_dir, target_dir, reference_path, runner=None):
    from contracts.engines.vllm.draft_forward import observe_forward

    return observe_forward(engine_dir, target_dir, reference_path, runner)


def ranks(engine_dirs, target_dir, tp, runner=None):
    from contracts.engines.ranks import max_process_ranks
    from contracts.engines.vllm.tensor_parallel import observe_ranks, observe_shard_ranges

    if tp > max_process_ranks():  # beyond what this machine runs as processes: vLLM's shard functions, one process
        return observe_shard_ranges(engine_dirs, target_dir, tp, runner)
    return observe_ranks(engine_dirs, target_dir, tp, runner)


def surface():
    from contracts.engines.vllm.surface import observe_surface

    return observe_surface()
