// Reading a .kiln file into its parts: every field checked, nothing trusted (docs/file-format.md).
#pragma once

#include <nlohmann/json.hpp>

#include "kiln/model.h"
#include "model_file/format.h"

namespace kiln {

struct Model::Parts {
  uint32_t format_version = 0;
  std::unique_ptr<Graph> graph;  // constants borrowed from the file's bytes
  ModelMetadata metadata;
  CompileOptions options;
  ModelPlanRecord plan;
};

namespace model_file {

// Parses and validates a whole file held in `data` (aligned to kConstantAlignment), which
// `owner` keeps alive for the constants; `file_mapping` when `data` is a read-only private
// mapping of the file (the constants may then give their pages back, Tensor::release_pages).
// Throws E10020 / E10021 (and E50001 for an unknown op).
Model::Parts read_model(const uint8_t* data, size_t size, std::shared_ptr<const void> owner,
                        bool file_mapping = false);

// The JSON form of a graph input or output and of the symbol table, written to the metadata
// section and compared with the graph on load.
nlohmann::json io_json(const Value& value, const SymbolTable& symbols);
nlohmann::json symbols_json(const SymbolTable& symbols);

}  // namespace model_file
}  // namespace kiln
