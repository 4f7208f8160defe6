// Factories of every pass; the pipeline (pipeline.cc) composes them into stages.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "passes/pass.h"

namespace kiln {

// Stage prepare.
// On CPUs with AVX512-BF16 (or when `native_bf16`): matmuls of widened bf16 values take them as
// bf16.
std::unique_ptr<Pass> make_fold_bf16_casts_into_matmul();
std::unique_ptr<Pass> make_fold_bf16_casts_into_matmul(bool native_bf16);
// Likewise convolutions, which also round a bf16 result themselves.
std::unique_ptr<Pass> make_fold_bf16_casts_into_conv();
std::unique_ptr<Pass> make_fold_bf16_casts_into_conv(bool native_bf16);
// Layer and RMS norms between bf16 casts read and write bf16 themselves (every CPU).
std::unique_ptr<Pass> make_fold_bf16_casts_into_widening_kernels();
std::unique_ptr<Pass> make_fold_transpose_into_matmul();
std::unique_ptr<Pass> make_constant_folding();
std::unique_ptr<Pass> make_algebraic_simplification();
std::unique_ptr<Pass> make_copy_elimination();
std::unique_ptr<Pass> make_common_subexpression_elimination();
std::unique_ptr<Pass> make_dead_code_elimination();

// Stage fuse: matmul, elementwise and normalization patterns.
std::unique_ptr<Pass> make_fuse_decomposed_gelu();
std::unique_ptr<Pass> make_fuse_decomposed_layer_norm();
std::unique_ptr<Pass> make_fuse_decomposed_rms_norm();
std::unique_ptr<Pass> make_fuse_decomposed_softmax();
std::unique_ptr<Pass> make_fuse_decomposed_attention();
std::unique_ptr<Pass> make_move_casts_across_head_permutes();
std::unique_ptr<Pass> make_fold_permute_into_attention();
std::unique_ptr<Pass> make_fold_linear_batch_norm();
std::unique_ptr<Pass> make_fuse_matmul_epilogue();
std::unique_ptr<Pass> make_fuse_elementwise_chains();
// Stage fuse: convolution patterns.
std::unique_ptr<Pass> make_fold_pad_into_conv();
std::unique_ptr<Pass> make_fold_conv_batch_norm();
std::unique_ptr<Pass> make_fuse_conv_epilogue();

// Stage format: convolution chains in the first of this CPU's candidate layouts for their dtype
// and convolutions that fits them (cpu::conv_layout_candidates), or of `candidates` (the last
// the fallback; one list for every chain, or one per dtype and the chain's conv2d nodes).
using LayoutCandidates =
    std::function<std::vector<Layout>(DType, const std::vector<const Node*>& convs)>;
std::unique_ptr<Pass> make_choose_layouts();
std::unique_ptr<Pass> make_choose_layouts(std::vector<Layout> candidates);
std::unique_ptr<Pass> make_choose_layouts(LayoutCandidates candidates);

}  // namespace kiln
