"""SGLang as the suite knows it: installed beside the suite (``--no-deps``: its declared dependencies are CUDA stacks;
the EAGLE-3 path's light ones come from its recipe), judged in this process; other releases in their own
environments. Its serving loop (EAGLEWorkerV2's draft attention) needs a GPU or sgl-kernel's CPU build."""

from contracts.engine_profile import EngineProfile, InstallProfile

PROFILE = EngineProfile(
    name="sglang",
    rank=0,
    label="SGLang",
    package="sglang",
    distributions=("sglang",),
    import_name="sglang",
    adapter="contracts.engines.sglang.adapter",
    server="contracts.engines.sglang.server",
    first_release="0.4.4",  # EAGLE-3 arrives in SGLang 0.4.4
    # measured on 0.5.3, 0.5.9, 0.5.12, 0.5.17 and 0.5.23: what the EAGLE-3 path imports on a CPU (config handling,
    # model registry, draft class, worker wiring, KV pools, torch-native attention), each at the version the release
    # declares; besides, imported on every measured release's path without being declared (or only through a CUDA
    # stack): triton (torch's CPU wheel brings none; 3.7 is the series torch 2.13 pairs with), safetensors (pinned by
    # nothing), starlette (with fastapi), dill (its multiprocessing helpers)
    install=InstallProfile(
        with_deps=False, always=("triton<3.8", "safetensors", "starlette", "dill"),
        eagle3_path=("transformers", "tokenizers", "orjson", "psutil", "pybase64", "requests", "pillow", "msgspec",
                     "pyzmq", "ipython", "aiohttp", "apache-tvm-ffi", "sentencepiece", "compressed-tensors", "gguf",
                     "openai", "partial-json-parser", "uvicorn", "fastapi", "einops", "setproctitle"),
        server_extras=("srt", "runtime_common", "runtime-common")),
    in_process=True,
    single_path="SGLang is judged on the worker its release uses",
    no_serving_loop="SGLang's serving loop does not run on a CPU (EAGLEWorkerV2's draft attention needs a GPU or "
                    "sgl-kernel's CPU build)",
    convert_writes=True,
    flat_config_only=True,
    eagle3_files=(r"^sglang/srt/(models/(llama_eagle3|llama|deepseek_v2|kimi_k25\w*)\.py|speculative/.*\.py|"
                  r"model_executor/.*\.py|model_loader/.*\.py|configs/model_config\.py|"
                  r"layers/(logits_processor|rotary_embedding\w*|linear|vocab_parallel_embedding)\.py|"
                  r"layers/rotary_embedding/.*\.py|layers/attention/torch_native_backend\.py|"
                  r"mem_cache/memory_pool\.py)$"),
)
