"""Write the modules run.sh times: IREE's default and one kernel with 1..12 heads a workgroup."""

from pathlib import Path

BASE = Path("../modules/attention_scores.mlir").read_text()
PIPELINE = (
    "translation_info = #iree_codegen.translation_info<pipeline = "
    "#iree_cpu.pipeline<DoubleTilingExpert>, {enable_loop_peeling}>"
)


def compilation_info(heads: int) -> str:
    """``wg32x32:v16x16:k4`` with a distribution tile of ``heads`` on the batch loop."""
    config = (
        f"distribution = [{heads}, 32, 32, 0], vector_common_parallel = [1, 16, 16, 0], "
        "vector_reduction = [0, 0, 0, 4]"
    )
    return (
        "{compilation_info = #iree_codegen.compilation_info<lowering_config = "
        f"#iree_cpu.lowering_config<{config}>, {PIPELINE}>}}"
    )


Path("default.mlir").write_text(BASE)
for heads in (1, 2, 6, 12):
    tiled = f"linalg.batch_matmul {compilation_info(heads)} ins"
    Path(f"b{heads}.mlir").write_text(BASE.replace("linalg.batch_matmul ins", tiled))
