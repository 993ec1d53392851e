"""llama.cpp (its ``xllamacpp`` CPU wheels): the converter of the release's own tree, which turns an HF EAGLE-3 draft
into the GGUF llama.cpp serves, and what that GGUF holds (``converter``); acceptance on its own server's speculative
loop (``acceptance``, for ``accept --engine llamacpp``); and the adapter the contracts judge (``adapter``: the converter
traced, the GGUF loader, the EAGLE-3 draft graph driven as the speculative loop drives it, ``graph``)."""
