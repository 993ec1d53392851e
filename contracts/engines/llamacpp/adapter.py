"""llama.cpp (its ``xllamacpp`` wheel and the tree it was built from) behind the one adapter skeleton
(``contracts.engines.inprocess.InProcess``): the nine observations every engine answers, each from llama.cpp's own
code: its converter (run as a user runs it, traced), its GGUF loader, and its EAGLE-3 draft graph driven as its
speculative loop drives it. llama.cpp has one EAGLE-3 path, the same graph on every backend."""

from __future__ import annotations

PATH = "draft-eagle3"
PATH_LABEL = "speculative type draft-eagle3 (common_speculative_impl_draft_eagle3)"


def info() -> dict:
    from contracts.engines.llamacpp.version import engine

    return engine()


def path(engine_dir, target_dir, runner=None):
    from contracts.engines.llamacpp.version import engine
    from contracts.observations import PathObservation

    return PathObservation(engine=engine(), kind="loop", judged=PATH, label=PATH_LABEL, default=PATH,
                           default_label=PATH_LABEL, available=[PATH],
                           default_why=("llama.cpp serves an EAGLE-3 draft on one path, whatever the device: the "
                                        "converter's GGUF, its loader, and the draft-eagle3 speculative loop over "
                                        "the same ggml graph on every backend"))


def load(engine_dir, target_dir=None, runner=None):
    from contracts.engines.llamacpp.loader import observe_load

    return observe_load(engine_dir, target_dir, runner)


def aux(engine_dir, target_dir, trainer_hf_indices, runner=None):
    from contracts.engines.llamacpp.aux_capture import observe_aux_capture

    return observe_aux_capture(engine_dir, target_dir, trainer_hf_indices, runner)


def config(engine_dir, trained_config, switches, target_config):
    from contracts.engines.llamacpp.config_probe import observe_config

    return observe_config(engine_dir, trained_config, switches, target_config)


def embed_head(engine_dir, target_dir, runner=None):
    from contracts.engines.llamacpp.wiring import observe_embed_head

    return observe_embed_head(engine_dir, target_dir, runner)


def forward(engine_dir, target_dir, reference_path, runner=None):
    from contracts.engines.llamacpp.draft_forward import observe_forward

    return observe_forward(engine_dir, target_dir, reference_path, runner)


def surface():
    from contracts.engines.llamacpp.surface import observe_surface

    return observe_surface()



def ranks(engine_dirs, target_dir, tp, runner=None):
    from contracts.engines.errors import ReplayError
    from contracts.engines.llamacpp.profile import PROFILE

    raise ReplayError(PROFILE.no_ranks)
