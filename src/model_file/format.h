// The layout of a .kiln file (docs/file-format.md): the constants the writer and the reader
// share, little-endian field access and the file checksum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln::model_file {

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'M', 'O', 'D', 'L'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint32_t kKnownFlags = 0;  // no flag is defined in version 1
inline constexpr size_t kHeaderSize = 64;
inline constexpr size_t kSectionEntrySize = 24;
inline constexpr size_t kConstantAlignment = 64;

// Header field offsets.
inline constexpr size_t kOffVersion = 8, kOffFlags = 12, kOffProducer = 16, kOffFileSize = 24,
                        kOffTableOffset = 32, kOffSectionCount = 40, kOffChecksum = 44;

enum class SectionType : uint32_t {
  Metadata = 1,       // JSON: producer, torch version, compile options, inputs, outputs
  Graph = 2,          // the textual IR, constants declared as inputs (no bytes)
  ConstantIndex = 3,  // JSON: per constant, its name and its offset and size in ConstantData
  ConstantData = 4,   // raw constant bytes, each aligned to kConstantAlignment
  Plan = 5,           // JSON: the producer's plan for the static input sizes
};
inline constexpr uint32_t kSectionTypeCount = 5;

inline uint32_t read_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint64_t read_u64(const uint8_t* p) { return read_u32(p) | uint64_t(read_u32(p + 4)) << 32; }
inline uint16_t read_u16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
inline void write_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void write_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void write_u16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v), p[1] = uint8_t(v >> 8); }

// CRC-32 (IEEE 802.3, the zlib polynomial), continued from `crc` (0 to start).
uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc = 0);
// The file checksum: CRC-32 of every byte except the checksum field itself, read in file order
// in 16 MiB pieces; `read(offset, bytes)` after each, so that a reader of a mapped file can give
// the pages back as it goes.
uint32_t file_checksum(const uint8_t* file, size_t size,
                       const std::function<void(size_t, size_t)>& read = {});

// Copies the nodes and outputs of `from` into `to`, whose inputs and constants are already in
// `map` (from's value → to's value). Names, attributes and types are kept as they are.
void copy_nodes(const Graph& from, Graph& to, std::map<const Value*, Value*>& map);

// The plan description's per-step "node = op [kernel name]" lines (CompiledGraph::describe_plan).
std::vector<std::string> plan_kernel_lines(const std::string& description);

}  // namespace kiln::model_file
