"""llama.cpp as the suite knows it: the ``xllamacpp`` wheel (a CPU build of its server, no dependencies) in its own
environment, beside the converter and gguf-py of the tree it was built from; a bare ``llamacpp`` means the pinned
release (the newest on the index that serves EAGLE-3). One speculative loop, which runs on ggml's CPU backend."""

from contracts.engine_profile import EngineProfile, InstallProfile, ServingLoopProfile

PROFILE = EngineProfile(
    name="llamacpp",
    rank=2,
    label="llama.cpp",
    package="xllamacpp",
    distributions=("xllamacpp",),
    import_name="xllamacpp",
    adapter="contracts.engines.llamacpp.adapter",
    server="contracts.engines.llamacpp.server",
    # the first xllamacpp whose converter takes a draft beside its target (--target-model-dir)
    first_release="2026.6.9713",
    # what its tree's converter declares, on the CPU torch; the wheel, then the converter and gguf-py from its tree
    install=InstallProfile(with_deps=True, derive="contracts.engines.llamacpp.recipe:derive",
                           from_source="contracts.engines.llamacpp.tree:unpack_for_environment"),
    pinned="2026.10.11549",
    single_path="llama.cpp is judged on its one speculative loop",
    # GGML's abort handler attaches gdb to print a backtrace (775 MB beside the worker, and the report's "last words"
    # were the backtrace's last frame instead of the GGML_ASSERT that stopped it); its own switch turns that off
    process_env=(("GGML_NO_BACKTRACE", "1"),),
    serving_loop=ServingLoopProfile(
        job="contracts.engines.llamacpp.acceptance",
        path="llama.cpp's server (xllamacpp {version}): the GGUFs its own converter writes, its EAGLE-3 speculative "
             "loop on ggml's CPU backend (the loop a GPU build runs)"),
    no_ranks=("llama.cpp has no tensor-parallel ranks: one process builds the one draft model and its backend "
              "scheduler places its tensors on the devices (--split-mode, --device-draft), so no rank builds a "
              "drafter of its own"),
)
