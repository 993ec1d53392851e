"""llama.cpp (its ``xllamacpp`` CPU wheels): the converter of the release's own tree, which turns an HF EAGLE-3 draft
into the GGUF llama.cpp serves, and what that GGUF holds (``converter``); acceptance on its own server's speculative
loop (``acceptance``, for ``accept --engine llamacpp``). The adapter the contracts judge is not here yet: ``check``
has no ``--engine llamacpp`` (``contracts.engine_spec.ENGINES``) until every observation is llama.cpp's own."""

PINNED = "2026.10.11549"  # the newest xllamacpp release on the index: what a bare ``llamacpp`` means
