// Kiln's compile stages in GE's order, each from an optimization level up (docs/passes.md):
// prepare (fold, simplify, clean up) at O1, fuse at O2, then format, partition, select and
// schedule at O3. A new pass is one add() line in its stage.
#include "passes/pass_list.h"

namespace kiln {

PassPipeline default_pipeline() {
  PassPipeline p;
  p.add_stage("prepare", 1);
  p.begin_fixed_point("simplify");
  p.add(make_fold_bf16_casts_into_matmul());  // before folding would widen bf16 weights
  p.add(make_fold_bf16_casts_into_conv());
  p.add(make_fold_bf16_casts_into_widening_kernels());
  p.add(make_fold_transpose_into_matmul());  // before folding would copy transposed weights
  p.add(make_constant_folding());
  p.add(make_algebraic_simplification());
  p.add(make_copy_elimination());
  p.add(make_common_subexpression_elimination());
  p.add(make_dead_code_elimination());
  p.end_fixed_point();

  p.add_stage("fuse", 2);
  p.add(make_fuse_decomposed_gelu());
  p.add(make_fuse_decomposed_layer_norm());
  p.add(make_fuse_decomposed_rms_norm());
  p.add(make_fuse_decomposed_softmax());
  p.add(make_fuse_decomposed_attention());
  p.add(make_move_casts_across_head_permutes());
  p.add(make_fold_permute_into_attention());
  // Again, for the norms recognized above and attention with its head permutes folded.
  p.add(make_fold_bf16_casts_into_widening_kernels());
  p.add(make_fold_linear_batch_norm());
  p.add(make_fuse_matmul_epilogue());
  p.add(make_fold_pad_into_conv());
  p.add(make_fold_conv_batch_norm());
  p.add(make_fuse_conv_epilogue());
  // Last: ops the fusions above can absorb into their producers go there first.
  p.add(make_fuse_elementwise_chains());
  // The folds above leave the constants they replaced (conv and batch norm weights) unread: an
  // exported model would carry both copies.
  p.add(make_dead_code_elimination());

  p.add_stage("format", 3);
  p.add(make_choose_layouts());

  p.add_stage("partition", 3);

  p.add_stage("select", 3);

  p.add_stage("schedule", 3);
  return p;
}

}  // namespace kiln
