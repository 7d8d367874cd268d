"""What a quantized bundle is made of: QuantConfig, the fast recipe (FAST, fast_recipe) and a DMTD bundle's copy
recipe (copy_quantization).

Import-light on purpose (no onnx, no torch): every `generate`, `chat` and `serve` run checks its cached bundle
against these recipes (cli/bundles.py), and importing the quantizer for that took ~2-4 s of a run's start.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mtpedge.runtime.kernels import NATIVE_LABEL, native_kernels_pay

WEIGHT_CHOICES = ("gguf", "int8", "int4")
KERNEL_CHOICES = ("onnxruntime", "mtpedge")
OUTPUT_CHOICES = ("same", "float32", "int8", "int4")
FINE_BLOCK = 16  # the smallest block MatMulNBits' int8 kernels take


@dataclass(frozen=True)
class QuantConfig:
    weights: str = "gguf"  # gguf | int8 | int4
    output_layer: str = "same"  # same | float32 | int8 | int4 ("same": like the other layers)
    block_size: int = 32  # int8/int4 blocks; GGUF grids keep their own
    # MatMulNBits accuracy_level for 4-bit blocks: 0 = float activations (exact grid), 4 = int8 activations
    # (faster, less exact). 8-bit blocks always use 4: without it they run 8-15x slower.
    accuracy_level: int = 0
    # MatMuls whose node name contains one of these (e.g. "down_proj") keep float activations (level 0) whatever
    # accuracy_level says: where int8 activations cost the most top-1 agreement
    float_activation_roles: tuple[str, ...] = ()
    # MatMuls whose node name contains one of these (4- or 8-bit, e.g. "lm_head") keep int8 activations but in
    # blocks of FINE_BLOCK inputs (the grid's blocks split, the weights unchanged): MLAS quantizes activations per
    # weight block, so this is the cheap way to make their activations more exact; unlike level 0 it computes a
    # row alike at every width
    fine_activation_roles: tuple[str, ...] = ()
    # trace the graphs onto onnxruntime's fused CPU ops first (export/fused_ops.py): a leaner call (FAST does;
    # benchmarks/results/fast/README.md, sections 9, 10 and 15)
    fused_ops: bool = False
    # MatMuls of one input (q/k/v, gate/up) as one MatMulNBits side by side (matmul_nbits.py): the same outputs bit
    # for bit, one kernel call instead of three (results/fast section 13)
    side_by_side: bool = True
    # every MatMulNBits then becomes a row-quantized MatMulInteger over int8 re-quantized weights
    # (integer_gemm.py): wide calls cost little more than one-row calls
    integer_gemm: bool = False
    # "mtpedge": the weight products (with their block minima) on mtpedge's own CPU kernel, com.mtpedge.BlockMatMul
    # (export/native_matmul.py, runtime/kernels/): the same grid and int8 activation blocks, weights shared across
    # the rows of a call; the bundle then needs the kernel library wherever it runs
    kernels: str = "onnxruntime"
    quality_report: bool = True

    def __post_init__(self) -> None:
        if self.weights not in WEIGHT_CHOICES:
            raise ValueError(f"weight precision {self.weights!r} is unknown: choose one of {', '.join(WEIGHT_CHOICES)}")
        if self.output_layer not in OUTPUT_CHOICES:
            raise ValueError(f"output-layer precision {self.output_layer!r} is unknown: "
                             f"choose one of {', '.join(OUTPUT_CHOICES)}")
        if self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block size must be a power of two >= 16, got {self.block_size}")
        if self.accuracy_level not in (0, 1, 2, 3, 4):
            raise ValueError(f"accuracy level must be 0-4, got {self.accuracy_level}")
        if self.kernels not in KERNEL_CHOICES:
            raise ValueError(f"kernels {self.kernels!r} are unknown: choose one of {', '.join(KERNEL_CHOICES)}")
        if self.kernels == "mtpedge" and (self.accuracy_level != 4 or self.float_activation_roles or self.integer_gemm):
            raise ValueError("mtpedge's kernels quantize every product's activations to int8 blocks (accuracy level "
                             "4, no float-activation roles, no integer GEMM): use --int8-activations, or --kernels "
                             "onnxruntime")

    def is_fine(self, node_name: str) -> bool:
        return any(role in node_name for role in self.fine_activation_roles)

    def level_for(self, node_name: str) -> int:
        """The accuracy level of one 4-bit MatMul (see float_activation_roles)."""
        return 0 if any(role in node_name for role in self.float_activation_roles) else self.accuracy_level

    @property
    def label(self) -> str:
        """The precision recorded per graph, e.g. `gguf`, `gguf-a4` (accuracy level 4) or `int4-b32+out:int8`."""
        main = self.weights if self.weights == "gguf" else f"{self.weights}-b{self.block_size}"
        if self.accuracy_level:
            main += f"-a{self.accuracy_level}"
            main += "".join(f"-{role.split('_')[0]}0" for role in self.float_activation_roles)
            main += "".join(f"-{role.split('_')[0]}{FINE_BLOCK}" for role in self.fine_activation_roles)
        main += "-fused" if self.fused_ops else ""
        main += "-igemm" if self.integer_gemm else ""
        main += NATIVE_LABEL if self.kernels == "mtpedge" else ""
        return main if self.output_layer == "same" else f"{main}+out:{self.output_layer}"


# The default bundle of a GGUF source (`generate`/`chat`/`serve`/`bench` without --bundle, `export`'s auto):
# the file's own grid, every 4-bit MatMul on the int8-activation kernels, the MLP's down projection with its
# activations quantized per 16 inputs. Measured on SmolLM2 (benchmarks/results/fast/README.md, sections 1 and 8):
# int8 activations everywhere 96.4% top-1 agreement with float32 (below the 97% gate); down_proj in 16-input
# blocks 97.5% (perplexity 17.21 vs 17.28); down_proj with float activations 98.1%, but float activations run a
# one-row call through another kernel than a wider call (root rows differed between widths), and cost more at
# widths 4 and 16: the down16 bundle decodes plainly 1.08x faster (benchmarks/bundle_ab.py). Fused ops on top of
# down16 alone cut a width-1 call to ~0.85x but top-1 agreement fell to 95.6% held text / 96.7% Spec-Bench
# answers, against 97.5% / 97.5% without them (section 10). The output layer's int8 activations per 16 inputs
# too (`lm16`, section 13): held text 96.94% -> 98.61%, Spec-Bench answers 96.79% -> 96.96% (3,984 tokens),
# perplexity +0.19% -> +0.01%, its call no slower; 8-bit blocks of 16 compute a row alike at every width on AVX2
# too. With MatMuls of one input side by side (QuantConfig.side_by_side, bit for bit) plain decoding ran 1.06x the
# previous default at 1 thread (results/fast/lm16/bundle_ab_1thread.log). On onnxruntime's fused CPU operators
# (section 15): a width-1 call 0.89x, plain decoding 1.06x at 1 thread (results/fast/fused-lm16/bundle_ab_1thread.log);
# quality vs float32 held text 98.61% -> 98.06%, Spec-Bench answers 96.96% -> 97.04% (3,984 tokens), perplexity
# +0.01% -> +0.19% / +0.08% -> +0.17% (results/fast/fused-lm16/quality.json); with the minima added per original
# block (matmul_nbits.minima_blocks) 98.06% / 97.54%, perplexity +0.42% / +0.20% (quality-final.json).
FAST = QuantConfig(weights="gguf", accuracy_level=4, fine_activation_roles=("down_proj", "lm_head"), fused_ops=True)


def fast_recipe() -> QuantConfig:
    """FAST on the kernels that pay on this machine (runtime.kernels.native_kernels_pay): mtpedge's own where its
    AVX-512 VNNI path runs (width-1 call 0.73x, plain decoding 1.31x onnxruntime's, quality 97.5% top-1 / perplexity
    +0.38% against float32: benchmarks/results/fast/README.md section 30), else onnxruntime's MatMulNBits."""
    return replace(FAST, kernels="mtpedge") if native_kernels_pay() else FAST


# the copy's weights and output layer in a quantized DMTD bundle (round-to-nearest blocks: QuantConfig.weights).
# An int4 head ran as fast within noise and cost 0.02 dmtd-spec τ on 13 tuning questions; the int8 one is also the
# lossy dmtd's (benchmarks/results/dmtd/README.md, twenty-fifth session)
COPY_PRECISION = ("int4", "int8")


def copy_quantization(quant: QuantConfig) -> QuantConfig:
    """The DMTD copy's graphs' recipe in a bundle whose base graphs take `quant`: its kernels and operators, on
    COPY_PRECISION blocks (their label is in the manifest's copy graph entries: export/dmtd_bundle.py)."""
    weights, output_layer = COPY_PRECISION
    return replace(quant, weights=weights, output_layer=output_layer, quality_report=False)
