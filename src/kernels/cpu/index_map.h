// Kernels for layout ops in which every output element is one input element or a fill value,
// chosen one dim at a time: expand, repeat, flip, roll and pad (constant, reflect, replicate).
//
// Along each output dim, a few segments say where its indices read: a segment covers `length`
// consecutive output indices and reads the input offsets offset, offset + step, ... (in
// elements; step 0 repeats one element, a negative step runs backwards), or is fill. An output
// element reads the sum of its dims' offsets, or is the fill value if any of its dims is fill.
// So expand is one segment of step 0 on a broadcast dim, flip one backward segment, roll two,
// pad three and repeat one per copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::cpu {

struct Segment {
  int64_t begin = 0;  // first output index along the dim
  int64_t length = 0;
  int64_t offset = 0;  // input offset read by output index `begin`
  int64_t step = 0;    // added per output index
  bool fill = false;   // the fill value rather than input elements (offset and step unused)
};

// The segments of one output dim of `size`, covering [0, size) in order.
struct DimMap {
  int64_t size = 0;
  std::vector<Segment> segments;

  // Appends `length` indices reading offset, offset + step, ... (nothing when length is 0).
  DimMap& read(int64_t length, int64_t offset, int64_t step);
  DimMap& fill(int64_t length);

  // A dim read as it is: index i reads i * stride.
  static DimMap identity(int64_t size, int64_t stride) { return DimMap().read(size, 0, stride); }
  // Every index reads the same (size-1) input dim.
  static DimMap broadcast(int64_t size) { return DimMap().read(size, 0, 0); }
};

struct IndexMap {
  std::vector<DimMap> dims;  // outermost first; their sizes multiply to the output's element count
  int64_t input_numel = 0;
  size_t element_bytes = 0;
  uint64_t fill_bits = 0;  // the fill value as convert.h's scalar_bits gives it
};

// Checks (KILN_ASSERT) that the segments of every dim cover it in order and that every read is
// inside the input: a map built wrong must fail loudly, never read out of bounds.
void check_index_map(const IndexMap& map);

// The reference: each output element from its multi-index and each dim's segment.
void index_map_reference(const IndexMap& map, const void* in, void* out);

// The row kernel: dims of size 1 folded into a base offset, then inner dims merged into the
// innermost while their segments stay runs of one step (a padded image plane becomes one row of
// fill, copy, fill); each output row is then a few memcpy / fill / strided runs, rows (or pieces
// of rows, when they are fewer than the threads) split over the OpenMP pool.
class IndexMapRows {
 public:
  IndexMapRows(const IndexMap& map, int threads);
  void run(const void* in, void* out) const;

 private:
  size_t element_bytes_;
  uint64_t fill_bits_;
  int threads_;
  int64_t numel_ = 0;
  int64_t base_offset_ = 0;
  bool all_fill_ = false;  // a size-1 dim is fill: so is every element
  // Input offset of each outer index, -1 for fill; outermost first.
  std::vector<std::vector<int64_t>> outer_;
  int64_t row_length_ = 0;
  std::vector<Segment> row_;
  // Each row is done in this many pieces of columns (more than 1 only when rows are few).
  int64_t pieces_ = 1;
  static constexpr int64_t kMinPiece = 16384;
};

}  // namespace kiln::cpu
