"""SGLang behind the one adapter skeleton (``contracts.engines.inprocess.InProcess``): the nine observations every
engine answers, each from SGLang's own code. SGLang judges the speculative worker its release uses for the draft,
so ``runner`` is accepted and not read; it builds a draft from the draft's config alone, so ``load`` does not read
the target."""

from __future__ import annotations


def info() -> dict:
    from contracts.engines.sglang.context import engine_version

    return {"name": "sglang", "version": engine_version()}


def preload() -> None:
    from contracts.engines.sglang.context import preload

    preload()


def path(engine_dir, target_dir, runner=None):
    from contracts.engines.sglang.workers import observe_path

    return observe_path(engine_dir, target_dir)


def load(engine_dir, target_dir=None, runner=None):
    from contracts.engines.sglang.loader import observe_load

    return observe_load(engine_dir)


def aux(engine_dir, target_dir, trainer_hf_indices, runner=None):
    from contracts.engines.sglang.aux_capture import observe_aux_capture

    return observe_aux_capture(engine_dir, target_dir, trainer_hf_indices=trainer_hf_indices)


def config(engine_dir, trained_config, switches, target_config):
    from contracts.engines.sglang.config_probe import observe_config

    return observe_config(engine_dir, trained_config, switches, target_config)


def embed_head(engine_dir, target_dir, runner=None):
    from contracts.engines.sglang.wiring import observe_embed_head

    return observe_embed_head(engine_dir, target_dir)


def forward(engine_dir, target_dir, reference_path, runner=None):
    from contracts.engines.sglang.draft_forward import observe_forward

    return observe_forward(engine_dir, target_dir, reference_path)


def ranks(engine_dirs, target_dir, tp, runner=None):
    from contracts.engines.errors import ReplayError
    from contracts.engines.ranks import MAX_RANKS_VAR, max_process_ranks
    from contracts.engines.sglang.tensor_parallel import observe_ranks

    if tp > max_process_ranks():
        raise ReplayError(f"SGLang's ranks are judged as processes, up to {max_process_ranks()} on this machine "
                          f"({MAX_RANKS_VAR}); its vocabulary shards depend on its published parallel state (its "
                          f"padding grows with the TP size), which this suite does not stand in for in one process")

    return observe_ranks(engine_dirs, target_dir, tp, runner)


def surface():
    from contracts.engines.sglang.surface import observe_surface

    return observe_surface()
