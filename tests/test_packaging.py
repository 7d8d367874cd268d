"""The runtime runs without torch, and the namespace maps the top-level folders."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_without_torch(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter where importing torch (or transformers) fails."""
    guard = textwrap.dedent("""
        import sys
        class NoTorch:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "transformers"):
                    raise ImportError(f"{name} is blocked: the runtime must not need it")
        sys.meta_path.insert(0, NoTorch())
    """)
    return subprocess.run([sys.executable, "-c", guard + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300)


def test_generate_runs_without_torch(tiny_bundle):
    result = run_without_torch(f"""
        from mtpedge.main import main
        code = main(["generate", "The quick", "--bundle", r"{tiny_bundle('qwen3')}", "--max-new-tokens", "5",
                     "--json"])
        assert code == 0, code
        assert "torch" not in sys.modules
    """)
    assert result.returncode == 0, result.stderr
    assert '"new_tokens"' in result.stdout


def test_a_cached_bundle_is_checked_for_re_export_without_the_exporter_s_imports(tiny_bundle):
    # every generate / chat / serve run on a cached default bundle runs these checks: importing torch and onnx for
    # them made a one-token run take 8.9 s instead of 3.0 s (benchmarks/results/fast/README.md, section 35)
    # (they are installed here: a check that caught an ImportError would pass a guard that blocks them)
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import mtpedge.bundles as bundles
        folder = Path(r"{tiny_bundle('llama')}")
        for mtp, dmtd in ((False, False), (True, False), (False, True)):
            bundles._why_reexport(folder, None, mtp, dmtd, fast=True)
        print(sorted({{name.split(".")[0] for name in sys.modules}} & {{"torch", "onnx", "transformers"}}))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_namespace_maps_the_top_level_folders():
    import mtpedge
    import mtpedge.export
    import mtpedge.models
    import mtpedge.runtime

    for module, folder in [(mtpedge, "cli"), (mtpedge.models, "models"), (mtpedge.export, "export"),
                           (mtpedge.runtime, "runtime")]:
        assert module.__file__.replace("\\", "/").endswith(f"{folder}/__init__.py")
