"""llama.cpp (its ``xllamacpp`` CPU wheels): the converter of the release's own tree, which turns an HF EAGLE-3 draft
into the GGUF llama.cpp serves, and what that GGUF holds. The adapter over its loader and speculative loop is not
here yet: no ``--engine llamacpp`` (``contracts.engine_spec.ENGINES``) until every observation is llama.cpp's own."""
