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


def test_namespace_maps_the_top_level_folders():
    import mtpedge
    import mtpedge.export
    import mtpedge.models
    import mtpedge.runtime

    for module, folder in [(mtpedge, "cli"), (mtpedge.models, "models"), (mtpedge.export, "export"),
                           (mtpedge.runtime, "runtime")]:
        assert module.__file__.replace("\\", "/").endswith(f"{folder}/__init__.py")
