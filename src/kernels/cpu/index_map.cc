#include "kernels/cpu/index_map.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/block_copy.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel_chunks.h"
#include "kiln/error.h"

namespace kiln::cpu {

DimMap& DimMap::read(int64_t length, int64_t offset, int64_t step) {
  if (length > 0) {
    segments.push_back(Segment{size, length, offset, step, false});
    size += length;
  }
  return *this;
}

DimMap& DimMap::fill(int64_t length) {
  if (length > 0) {
    segments.push_back(Segment{size, length, 0, 0, true});
    size += length;
  }
  return *this;
}

namespace {

int64_t output_numel(const IndexMap& map) {
  int64_t n = 1;
  for (const DimMap& d : map.dims) n *= d.size;
  return n;
}

// The input offset that index i of `dim` contributes, or -1 for fill.
int64_t contribution(const DimMap& dim, int64_t i) {
  for (const Segment& s : dim.segments)
    if (i < s.begin + s.length) return s.fill ? -1 : s.offset + (i - s.begin) * s.step;
  KILN_ASSERT(false, "index " << i << " is past the segments of a dim of size " << dim.size);
  return -1;
}

}  // namespace

void check_index_map(const IndexMap& map) {
  if (output_numel(map) == 0) return;
  int64_t lowest = 0, highest = 0;
  bool reads = true;
  for (const DimMap& dim : map.dims) {
    int64_t next = 0, dim_low = INT64_MAX, dim_high = INT64_MIN;
    for (const Segment& s : dim.segments) {
      KILN_ASSERT(s.begin == next && s.length > 0, "segments don't tile the dim in order");
      next += s.length;
      if (s.fill) continue;
      const int64_t last = s.offset + (s.length - 1) * s.step;
      dim_low = std::min({dim_low, s.offset, last});
      dim_high = std::max({dim_high, s.offset, last});
    }
    KILN_ASSERT(next == dim.size, "segments cover " << next << " of a dim of size " << dim.size);
    if (dim_low > dim_high) {  // all fill: nothing is read
      reads = false;
      continue;
    }
    lowest += dim_low;
    highest += dim_high;
  }
  KILN_ASSERT(!reads || (lowest >= 0 && highest < map.input_numel),
              "an index map reads offsets " << lowest << ".." << highest << " of an input of "
                                            << map.input_numel << " elements");
}

void index_map_reference(const IndexMap& map, const void* in, void* out) {
  const int64_t numel = output_numel(map);
  const size_t rank = map.dims.size();
  with_element_type(map.element_bytes, [&](auto zero) {
    using E = decltype(zero);
    const E* x = static_cast<const E*>(in);
    E* y = static_cast<E*>(out);
    const E fill = element_from_bits<E>(map.fill_bits);
    for (int64_t i = 0; i < numel; ++i) {
      int64_t rest = i, offset = 0;
      bool is_fill = false;
      for (size_t d = rank; d-- > 0;) {
        const int64_t c = contribution(map.dims[d], rest % map.dims[d].size);
        rest /= map.dims[d].size;
        is_fill = is_fill || c < 0;
        offset += c;
      }
      y[i] = is_fill ? fill : x[offset];
    }
  });
}

IndexMapRows::IndexMapRows(const IndexMap& map, int threads)
    : element_bytes_(map.element_bytes),
      fill_bits_(map.fill_bits),
      threads_(threads),
      numel_(output_numel(map)) {
  check_index_map(map);
  if (numel_ == 0) return;
  std::vector<DimMap> dims;
  for (const DimMap& d : map.dims) {
    if (d.size != 1) {
      dims.push_back(d);
    } else if (d.segments[0].fill) {
      all_fill_ = true;
    } else {
      base_offset_ += d.segments[0].offset;
    }
  }
  if (dims.empty()) dims.push_back(DimMap::identity(1, 1));
  // Merges the dim before the innermost into it while the innermost is one run of one step
  // and each segment of the outer one continues that run (or is fill, or a single index).
  while (dims.size() >= 2) {
    const DimMap& inner = dims.back();
    const DimMap& outer = dims[dims.size() - 2];
    if (inner.segments.size() != 1 || inner.segments[0].fill) break;
    const Segment run = inner.segments[0];
    const bool continues = std::all_of(
        outer.segments.begin(), outer.segments.end(), [&](const Segment& s) {
          return s.fill || s.length == 1 || s.step == run.step * inner.size;
        });
    if (!continues) break;
    DimMap merged;
    for (const Segment& s : outer.segments) {
      if (s.fill) merged.fill(s.length * inner.size);
      else merged.read(s.length * inner.size, s.offset + run.offset, run.step);
    }
    dims.pop_back();
    dims.back() = std::move(merged);
  }
  row_length_ = dims.back().size;
  row_ = dims.back().segments;
  // Fewer rows than threads (a whole flipped or rolled tensor is one row): long rows are cut into
  // pieces of columns so that every thread gets work.
  if (numel_ / row_length_ < threads_)
    pieces_ = std::clamp<int64_t>(row_length_ / kMinPiece, 1, threads_);
  dims.pop_back();
  for (const DimMap& d : dims) {
    std::vector<int64_t>& table = outer_.emplace_back();
    for (int64_t i = 0; i < d.size; ++i) table.push_back(contribution(d, i));
  }
}

void IndexMapRows::run(const void* in, void* out) const {
  if (numel_ == 0) return;
  with_element_type(element_bytes_, [&](auto zero) {
    using E = decltype(zero);
    const E* x = static_cast<const E*>(in) + base_offset_;
    const E fill = element_from_bits<E>(fill_bits_);
    const int64_t rows = numel_ / row_length_;
    // Item q is piece q % pieces_ (a range of columns) of row q / pieces_.
    auto run_items = [&](int64_t begin, int64_t end) {
      for (int64_t q = begin; q < end; ++q) {
        const int64_t r = q / pieces_, piece = q % pieces_;
        const int64_t first = row_length_ * piece / pieces_;
        const int64_t last = row_length_ * (piece + 1) / pieces_;
        E* y = static_cast<E*>(out) + r * row_length_;
        int64_t rest = r, offset = 0;
        bool is_fill = all_fill_;
        for (size_t d = outer_.size(); d-- > 0;) {
          const int64_t c = outer_[d][rest % static_cast<int64_t>(outer_[d].size())];
          rest /= static_cast<int64_t>(outer_[d].size());
          is_fill = is_fill || c < 0;
          offset += c;
        }
        if (is_fill) {
          std::fill(y + first, y + last, fill);
          continue;
        }
        for (const Segment& s : row_) {
          const int64_t b = std::max(s.begin, first), e = std::min(s.begin + s.length, last);
          if (b >= e) continue;
          E* dst = y + b;
          const E* src = x + offset + s.offset + (b - s.begin) * s.step;
          const int64_t n = e - b;
          if (s.fill) std::fill_n(dst, n, fill);
          else if (s.step == 1) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(E));
          else if (s.step == 0) std::fill_n(dst, n, *src);
          else
            for (int64_t k = 0; k < n; ++k) dst[k] = src[k * s.step];
        }
      }
    };
    parallel_chunks(rows * pieces_, row_length_ / pieces_, threads_, run_items);
  });
}

}  // namespace kiln::cpu
