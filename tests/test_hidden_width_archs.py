"""``hidden-width`` for the specforge draft against a tiny target of each architecture family that EAGLE-3 is
served on (fixtures/targets/*-tiny-config: published configs scaled down, config only; see
contracts/trainers/target_configs.py). Each case states the evidence the suite reaches on a CPU with
SGLang's real code and the verdict:

- observed: a tiny instance of the architecture's own SGLang class ran forward on CPU, the width it handed
  over was measured, and the draft's fc was seen to run (or not).
- static: the forward cannot run on a CPU; the verdict rests on the engine's registry and hook.
"""

from __future__ import annotations

import pytest

from tests.conftest import DRAFTS, FIXTURES

pytestmark = pytest.mark.filterwarnings("ignore")

# arch -> (target dir under fixtures/targets, evidence reached on CPU, verdict)
CASES = {
    "LlamaForCausalLM": ("llama-tiny", "observed", "pass"),
    "Qwen3ForCausalLM": ("qwen3-tiny-config", "observed", "pass"),
    "Qwen3MoeForCausalLM": ("qwen3-moe-tiny-config", "observed", "pass"),
    # MLA: run as decode steps, the form SGLang's torch-native backend can run against the latent KV pool
    "DeepseekV3ForCausalLM": ("deepseek-v3-tiny-config", "observed", "pass"),
    "KimiK25ForConditionalGeneration": ("kimi-k25-tiny-config", "observed", "pass"),
    # attention sinks: SGLang's torch-native backend (the CPU one) does not take `sinks`
    "GptOssForCausalLM": ("gpt-oss-tiny-config", "static", "pass"),
    # no set_eagle3_layers_to_capture in 0.5.23: the engine refuses, and without capture fc is bypassed
    "MixtralForCausalLM": ("mixtral-tiny-config", "observed", "fail"),
}


@pytest.mark.parametrize("arch", list(CASES))
def test_hidden_width_per_architecture(arch):
    from contracts.subject import Subject

    target_name, evidence, verdict = CASES[arch]
    target = FIXTURES / "targets" / target_name
    subject = Subject(f"specforge@{target_name}", DRAFTS["specforge"], target, trainer="specforge")
    try:
        (result,) = subject.run(["hidden-width"])
        aux = subject.aux
    finally:
        subject.close()

    assert aux.target_architecture == arch and aux.target_class == arch
    assert aux.evidence == evidence, aux.evidence_reason
    assert result.status == verdict, (result.summary, result.evidence)
    n = aux.num_target_layers
    if evidence == "observed":
        assert aux.tiny_hidden_size == 64 and aux.fc_in_features == 3 * 64
        if verdict == "pass":
            # the specforge draft (no eagle_config) gets the engine's default capture [2, N//2, N-3], which are
            # exactly the layers specforge trains on ([1, N//2-1, N-4] + 1)
            assert aux.layers_to_capture == [2, n // 2, n - 3]
            assert aux.hidden_width == 3 * 64 and aux.fc_ran is True and aux.draft_forward_error is None
    else:
        assert "sinks" in aux.evidence_reason and "torch-native" in aux.evidence_reason
        assert aux.hook == "implemented" and aux.layers_to_capture == [2, n // 2, n - 3]
        assert "static evidence only" in result.summary
    if arch == "MixtralForCausalLM":
        assert aux.hook == "missing"
        assert "ValueError" in aux.configure_error and "set_eagle3_layers_to_capture" in aux.configure_error
        assert "set_eagle3_layers_to_capture" in result.summary
        assert aux.hidden_width == 64 and aux.fc_ran is False  # one layer's state handed over, fc bypassed
        assert result.fix and "set_eagle3_layers_to_capture" in result.fix
    if arch == "KimiK25ForConditionalGeneration":
        assert aux.hook.startswith("delegates to the inner language model")
