"""OpenVINO GenAI: its exporter (optimum-intel) turns a draft into an OpenVINO IR, its ``LLMPipeline`` serves it
beside the target's IR with its EAGLE-3 speculative decoding. On a CPU this is the deployment itself."""
