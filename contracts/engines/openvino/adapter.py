"""OpenVINO GenAI behind the one adapter skeleton (``contracts.engines.inprocess.InProcess``): the nine observations
every engine answers, each from its own code: the exporter that writes the IR it serves (optimum-intel, its load
report), the IR itself (its constants, inputs and outputs), and its speculative pipeline. One path on a CPU:
``LLMPipeline`` with a ``draft_model`` through continuous batching (``Eagle3DecodingImpl``); its stateful path is the
NPU's."""

from __future__ import annotations

PATH = "eagle3-cb"
PATH_LABEL = "LLMPipeline with draft_model (continuous batching, Eagle3DecodingImpl)"


def info() -> dict:
    from contracts.engines.openvino.version import engine

    return engine()


def path(engine_dir, target_dir, runner=None):
    from contracts.engines.openvino.version import engine
    from contracts.observations import PathObservation

    return PathObservation(engine=engine(), kind="loop", judged=PATH, label=PATH_LABEL, default=PATH,
                           default_label=PATH_LABEL, available=[PATH],
                           default_why=("on a CPU, LLMPipeline with a draft model runs speculative decoding through "
                                        "continuous batching (llm/pipeline.cpp: its stateful path requires an NPU)"))


def load(engine_dir, target_dir=None, runner=None):
    from contracts.engines.openvino.loader import observe_load

    return observe_load(engine_dir, target_dir, runner)


def aux(engine_dir, target_dir, trainer_hf_indices, runner=None):
    from contracts.engines.openvino.aux_capture import observe_aux_capture

    return observe_aux_capture(engine_dir, target_dir, trainer_hf_indices, runner)


def config(engine_dir, trained_config, switches, target_config):
    from contracts.engines.openvino.config_probe import observe_config

    return observe_config(engine_dir, trained_config, switches, target_config)


def embed_head(engine_dir, target_dir, runner=None):
    from contracts.engines.openvino.wiring import observe_embed_head

    return observe_embed_head(engine_dir, target_dir, runner)


def forward(engine_dir, target_dir, reference_path, runner=None):
    from contracts.engines.openvino.draft_forward import observe_forward

    return observe_forward(engine_dir, target_dir, reference_path, runner)


def surface():
    from contracts.engines.openvino.surface import observe_surface

    return observe_surface()



def ranks(engine_dirs, target_dir, tp, runner=None):
    from contracts.engines.errors import ReplayError
    from contracts.engines.openvino.profile import PROFILE

    raise ReplayError(PROFILE.no_ranks)
