"""OpenVINO GenAI behind the one adapter skeleton (``contracts.engines.inprocess.InProcess``): the eight observations
every engine answers, each from its own code: the exporter that writes the IR it serves (optimum-intel, its load
report), the IR itself (its constants, inputs and outputs), and its speculative pipeline. One path on a CPU:
``LLMPipeline`` with a ``draft_model`` through continuous batching (``Eagle3DecodingImpl``); its stateful path is the
NPU's. The observations this release's adapter does not make yet say so (``ReplayError``: not judged), never a
verdict of ours in their place."""

from __future__ import annotations

PATH = "eagle3-cb"
PATH_LABEL = "LLMPipeline with draft_model (continuous batching, Eagle3DecodingImpl)"


def _not_yet(what: str):
    from contracts.engines.errors import ReplayError

    return ReplayError(f"this suite does not observe OpenVINO GenAI's {what} yet")


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
    raise _not_yet("target layer taps (the draft IR's hidden_layers_list, else its {2, N/2, N-3} rule)")


def config(engine_dir, trained_config, switches, target_config):
    raise _not_yet("config handling (the exporter's draft module and its switches)")


def embed_head(engine_dir, target_dir, runner=None):
    raise _not_yet("embedding and head wiring (the embedding copied from the target at compile)")


def forward(engine_dir, target_dir, reference_path, runner=None):
    raise _not_yet("draft forward (the IR run against the trainer's reference)")


def surface():
    from contracts.engines.openvino.surface import observe_surface

    return observe_surface()
