"""OpenVINO GenAI as the suite knows it: the ``openvino-genai`` wheel (with OpenVINO and its tokenizers, its own
dependencies) beside the exporter that turns a draft into the IR it serves (optimum-intel, the release paired with the
same OpenVINO), in its own environment; a bare ``openvino`` means the pinned release. One speculative path on a CPU:
``LLMPipeline`` with a ``draft_model``, through continuous batching (its stateful path needs an NPU)."""

from contracts.engine_profile import EngineProfile, InstallProfile, ServingLoopProfile

PROFILE = EngineProfile(
    name="openvino",
    rank=3,
    label="OpenVINO GenAI",
    package="openvino-genai",
    distributions=("openvino-genai",),
    import_name="openvino_genai",
    adapter="contracts.engines.openvino.adapter",
    # the first openvino-genai serving an EAGLE-3 draft on a CPU (its continuous-batching EAGLE-3 strategy, #3055)
    first_release="2026.0.0.0",
    # its own dependencies (OpenVINO, its tokenizers) and the exporter paired with its OpenVINO, on the CPU torch;
    # the torchvision the exporter pulls is CUDA-built and breaks its import on a CPU
    install=InstallProfile(with_deps=True, remove=("torchvision",), derive="contracts.engines.openvino.recipe:derive"),
    pinned="2026.4.1.0",
    single_path="OpenVINO GenAI is judged on its one speculative path on a CPU",
    # its exporter cannot read speculators' nested config (transformers: "Unrecognized model"): a speculators draft
    # is judged on (and convert writes) the flat form a user writes by hand
    flat_config_only=True,
    # convert writes the copy and, beside it, the IR its exporter makes of it with the layer ids in its rt_info
    convert_writes=True,
    convert_job="contracts.engines.openvino.serve_copy",
    # OpenVINO's telemetry (openvino_telemetry, used by its converter and the exporter's tools) forks the worker for
    # each event it sends unless told it runs in CI: its one process-local switch (the other is the user's own
    # consent file). A check of a user's draft sends nothing on their behalf, and the forks (a copy of a
    # 500 MB process each) no longer count in the tree's memory. OPENVINO_LOG_LEVEL=3: GenAI logs what it decides as
    # it builds the pair (its INFO lines, read by contracts.engines.openvino.pipeline), set where OpenVINO runs only
    process_env=(("CI", "true"), ("OPENVINO_LOG_LEVEL", "3")),
    serving_loop=ServingLoopProfile(
        job="contracts.engines.openvino.acceptance",
        path="LLMPipeline with the draft model (continuous batching) on a CPU: the IRs its "
             "exporter writes, the draft's with its trained layer ids in rt_info (hidden_layers_list)"),
    no_ranks=("OpenVINO GenAI has no tensor-parallel ranks: one pipeline compiles the draft model for one device "
              "(a multi-device plugin splits it inside that process), so no rank builds a drafter of its own"),
)
