"""Pytest plugin of ``benchmarks/gpu_proof.sh`` (``-p gpu_proof_ising``) for the
catalytic-ising tests: where the plugin package is importable (the proof puts its
checkout on the path) but not installed, its entry point is missing, so this registers
``catalytic_ising.plugin`` on the process-wide engine as the entry point would."""

from __future__ import annotations


def pytest_configure(config):
    import catalytic as cat

    eng = cat.get_engine()
    if "ising" not in eng.plugin_names():
        import catalytic_ising.plugin

        eng.register_plugin(catalytic_ising.plugin, "ising")
