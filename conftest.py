"""In-repo runs: the bundled trainer-built fixtures become contract subjects, and Hypothesis profiles.

The options, marker and items themselves come from the ``eagle3_contracts`` pytest plugin (entry point).
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, max_examples=50, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None, print_blob=True)
settings.register_profile("nightly", max_examples=2000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config):
    # Bundled subjects join a whole-suite run or an explicit `-m contracts`, not a run of one test file.
    if config.option.file_or_dir and "contracts" not in (config.option.markexpr or ""):
        return
    from contracts.bundled import bundled_subjects, expected_failures
    from contracts.plugin import add_subjects, engines

    for engine in engines(config):
        documented = expected_failures(engine, config.getoption("contracts_tp", 1))
        add_subjects(config, bundled_subjects(engine=engine), documented or {})
