// libFuzzer target for the .kiln loader (make test-fuzz; docs/file-format.md). Each input is
// loaded twice: as is (mostly stopped by the checksum) and with its checksum recomputed, so the
// section table, the JSON sections, the textual IR and the constant checks all see mutations.
// A kiln::Error is the expected outcome of a bad file; anything else (a crash, a sanitizer
// report, an assertion, another exception) is a finding.
#include <cstdint>
#include <vector>

#include "kiln/model.h"
#include "model_file/format.h"

namespace {

void load(const uint8_t* data, size_t size) {
  kiln::LoadOptions options;
  options.threads = 1;
  options.plan_check = "ignore";
  try {
    auto model = kiln::Model::load_from_memory(data, size, options);
    (void)model->inputs();
  } catch (const kiln::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  load(data, size);
  if (size >= kiln::model_file::kHeaderSize) {
    std::vector<uint8_t> fixed(data, data + size);
    kiln::model_file::write_u32(fixed.data() + kiln::model_file::kOffChecksum,
                                kiln::model_file::file_checksum(fixed.data(), size));
    load(fixed.data(), size);
  }
  return 0;
}
