"""A fourth engine, from a folder outside the package: SGLang 0.5.23's recorded answers (fixtures/observed/) replayed
as an engine of its own. It is what `tests/test_engine_folder.py` adds to the suite with no file outside this folder
changed (``EAGLE3_CONTRACTS_ENGINE_PATH`` names the folder above it)."""

from contracts.engine_profile import EngineProfile, InstallProfile

PROFILE = EngineProfile(
    name="replayed",
    label="Replayed SGLang",
    package="eagle3-contracts-replayed-sglang",  # never installed: it answers in this process from recordings
    distributions=("eagle3-contracts",),  # "installed" with the suite: its release is the suite's
    import_name="replayed_sglang",
    adapter="replayed_sglang.adapter",
    first_release="0.5.23",
    install=InstallProfile(with_deps=False),
    in_process=True,
    single_path="the replayed engine has the one path its recording took",
    no_serving_loop="a recording holds no serving loop",
    flat_config_only=True,  # it replays SGLang, which reads speculators' drafts in the flat form written by hand
)
