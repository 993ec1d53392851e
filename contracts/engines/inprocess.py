"""The SGLang installed in this environment, driven in this process (the pinned engine's fast path, and what
an engine worker runs inside another release's environment)."""

from __future__ import annotations

from pathlib import Path


def installed_sglang() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


class InProcessSGLang:
    def __init__(self, spec: str = "sglang"):
        self.spec = spec

    def info(self) -> dict:
        from contracts.engines.sglang.context import engine_version

        return {"name": "sglang", "version": engine_version()}

    def load(self, engine_dir):
        from contracts.engines.sglang import observe_load

        return observe_load(Path(engine_dir))

    def aux(self, engine_dir, target_dir, trainer_hf_indices):
        from contracts.engines.sglang.aux_capture import observe_aux_capture

        return observe_aux_capture(Path(engine_dir), Path(target_dir), trainer_hf_indices=trainer_hf_indices)

    def config(self, engine_dir, trained_config, switches, target_config):
        from contracts.engines.sglang.config_probe import observe_config

        return observe_config(Path(engine_dir), trained_config, switches, target_config)

    def embed_head(self, engine_dir, target_dir):
        from contracts.engines.sglang.wiring import observe_embed_head

        return observe_embed_head(Path(engine_dir), Path(target_dir))

    def forward(self, engine_dir, target_dir, reference_path):
        from contracts.engines.sglang.draft_forward import observe_forward

        return observe_forward(Path(engine_dir), None if target_dir is None else Path(target_dir),
                               None if reference_path is None else Path(reference_path))

    def surface(self):
        from contracts.engines.sglang.surface import observe_surface

        return observe_surface()
