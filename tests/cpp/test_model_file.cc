// The .kiln model file: round trips (static and symbolic), memory-mapped constants, metadata,
// the recorded plan, and every kind of bad file giving its coded error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "kiln/kiln.h"
#include "kiln/model.h"
#include "model_file/format.h"
#include "ops_test_util.h"

namespace kiln {
namespace {

using model_file::file_checksum;

Tensor random_tensor(std::vector<int64_t> sizes, uint32_t seed) {
  std::mt19937 rng(seed);
  return test::random_tensor(DType::F32, sizes, rng, -1, 1);
}

ErrorCode code_of(const std::function<void()>& fn) { return test::error_code_of(fn); }

// relu(conv2d(x, w) + b) with a static batch, or a symbolic batch "B" in [1, 8].
std::unique_ptr<Graph> conv_block(bool symbolic) {
  auto g = std::make_unique<Graph>("conv_block");
  Dim batch = symbolic ? g->add_symbol("B", 1, 8) : Dim(2);
  Value* x = g->add_input("x", TensorType{DType::F32, {batch, Dim(3), Dim(8), Dim(8)}});
  Value* w = g->add_constant("w", random_tensor({4, 3, 3, 3}, 1));
  Value* b = g->add_constant("b", random_tensor({1, 4, 1, 1}, 2));
  Value* y = g->add("conv2d", {x, w}, {{"padding", std::vector<int64_t>{1, 1, 1, 1}}});
  g->set_outputs({g->add("relu", {g->add("add", {y, b})})});
  return g;
}

std::vector<uint8_t> model_bytes(bool symbolic, const ModelMetadata& meta = {}) {
  return serialize_model(*CompiledGraph::compile(*conv_block(symbolic)), meta);
}

void fix_checksum(std::vector<uint8_t>& bytes) {
  model_file::write_u32(bytes.data() + model_file::kOffChecksum,
                        file_checksum(bytes.data(), bytes.size()));
}

std::shared_ptr<const Model> load(const std::vector<uint8_t>& bytes, LoadOptions options = {}) {
  return Model::load_from_memory(bytes.data(), bytes.size(), options);
}

void expect_same_output(const CompiledGraph& a, const Session& b, const Tensor& x) {
  std::vector<Tensor> expected = a.run({x.view()});
  std::vector<Tensor> got = b.run({x.view()});
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].same_contents(expected[i]));
}

TEST(ModelFile, StaticRoundTripRunsBitIdentical) {
  auto g = conv_block(false);
  auto compiled = CompiledGraph::compile(*g);
  ModelMetadata meta;
  meta.torch_version = "2.13.0";
  meta.properties["source"] = "test";
  auto model = load(serialize_model(*compiled, meta));
  EXPECT_EQ(model->format_version(), model_file::kFormatVersion);
  EXPECT_EQ(model->metadata().torch_version, "2.13.0");
  EXPECT_EQ(model->metadata().properties.at("source"), "test");
  EXPECT_EQ(model->metadata().producer.rfind("kiln ", 0), 0u);
  ASSERT_EQ(model->inputs().size(), 1u);
  EXPECT_EQ(model->inputs()[0].name, "x");
  EXPECT_EQ(model->inputs()[0].sizes, (std::vector<int64_t>{2, 3, 8, 8}));
  ASSERT_EQ(model->outputs().size(), 1u);
  EXPECT_EQ(model->outputs()[0].sizes, (std::vector<int64_t>{2, 4, 8, 8}));
  EXPECT_EQ(print_graph(model->graph()), print_graph(compiled->graph()));
  // The recorded plan is this build's plan: no warning, same steps and arena.
  EXPECT_TRUE(model->recorded_plan().present);
  EXPECT_TRUE(model->plan_warning().empty()) << model->plan_warning();
  EXPECT_EQ(model->recorded_plan().node_kernels.size(), compiled->graph().num_nodes());
  EXPECT_EQ(model->recorded_plan().arena_bytes,
            int64_t(compiled->memory_stats({{2, 3, 8, 8}}).arena_bytes));
  expect_same_output(*compiled, model->session(), random_tensor({2, 3, 8, 8}, 7));
}

TEST(ModelFile, SymbolicRoundTripKeepsRangesAndRunsEveryShape) {
  auto compiled = CompiledGraph::compile(*conv_block(true));
  auto model = load(serialize_model(*compiled));
  EXPECT_FALSE(model->recorded_plan().present);
  EXPECT_EQ(model->inputs()[0].sizes, (std::vector<int64_t>{-1, 3, 8, 8}));
  EXPECT_EQ(model->inputs()[0].dim_names[0], "B");
  ASSERT_EQ(model->symbols().size(), compiled->graph().symbols().size());
  EXPECT_EQ(model->symbols()[0].min, 1);
  EXPECT_EQ(model->symbols()[0].max, 8);
  for (int64_t batch : {1, 5, 8})
    expect_same_output(*compiled, model->session(), random_tensor({batch, 3, 8, 8}, 9));
  EXPECT_EQ(code_of([&] { model->session().run({random_tensor({9, 3, 8, 8}, 1).view()}); }),
            ErrorCode::DynamicShapeRange);
}

TEST(ModelFile, FileConstantsAreMappedInPlaceAndAligned) {
  auto compiled = CompiledGraph::compile(*conv_block(false));
  auto path = std::filesystem::temp_directory_path() / "kiln_test_model_file.kiln";
  save_model(*compiled, path.string());
  auto model = Model::load(path.string());
  std::filesystem::remove(path);  // the mapping outlives the name
  for (const Value* c : model->graph().constants()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c->constant().data()) % kAlignment, 0u);
    const Value* original = compiled->graph().find_value(c->name());
    ASSERT_NE(original, nullptr);
    EXPECT_TRUE(c->constant().same_contents(original->constant()));
    EXPECT_NE(c->constant().data(), original->constant().data());
  }
  expect_same_output(*compiled, model->session(), random_tensor({2, 3, 8, 8}, 3));
}

// The checksum is the standard CRC-32 (files written before it came from zlib still load), and
// reading it in 16 MiB pieces gives the one-pass value, each piece reported once, in order.
TEST(ModelFile, ChecksumIsCrc32ReadInPieces) {
  const std::string check = "123456789";
  EXPECT_EQ(model_file::crc32(reinterpret_cast<const uint8_t*>(check.data()), check.size()),
            0xCBF43926u);
  std::vector<uint8_t> bytes((size_t(40) << 20) + 123);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 2654435761u >> 24);
  const size_t skip = model_file::kOffChecksum;
  uint32_t whole = model_file::crc32(bytes.data(), skip);
  whole = model_file::crc32(bytes.data() + skip + 4, bytes.size() - skip - 4, whole);
  std::vector<std::pair<size_t, size_t>> pieces;
  EXPECT_EQ(file_checksum(bytes.data(), bytes.size(),
                          [&](size_t offset, size_t n) { pieces.emplace_back(offset, n); }),
            whole);
  const size_t piece = size_t(16) << 20;
  EXPECT_EQ(pieces, (std::vector<std::pair<size_t, size_t>>{
                        {0, piece}, {piece, piece}, {2 * piece, bytes.size() - 2 * piece}}));
}

// Resident kB of this process's mapping of `path`, from /proc/self/smaps.
int64_t resident_kb_of_mapping(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_mapping = false;
  int64_t kb = 0;
  while (std::getline(smaps, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') != std::string::npos && line.find(':') != std::string::npos &&
        line.find(" kB") == std::string::npos) {
      in_mapping = line.find(path) != std::string::npos;
    } else if (in_mapping && line.rfind("Rss:", 0) == 0) {
      kb += std::stoll(line.substr(4));
    }
  }
  return kb;
}

// A loaded model holds one copy of a prepacked weight: its pages in the file's mapping are given
// back once the convolution has its reordered copy (the checksum had read them all), and what a
// kernel reads in place (the bias) faults back in at the run, with the same results.
TEST(ModelFile, PrepackedConstantsGiveTheirFilePagesBack) {
  Graph g("wide_conv");
  Value* x = g.add_input("x", TensorType{DType::F32, {Dim(1), Dim(256), Dim(6), Dim(6)}});
  Value* w = g.add_constant("w", random_tensor({256, 256, 3, 3}, 1));  // 2304 KiB
  Value* b = g.add_constant("b", random_tensor({1, 256, 1, 1}, 2));
  Value* y = g.add("conv2d", {x, w}, {{"padding", std::vector<int64_t>{1, 1, 1, 1}}});
  g.set_outputs({g.add("add", {y, b})});
  auto compiled = CompiledGraph::compile(g);
  auto path = std::filesystem::temp_directory_path() / "kiln_test_release_pages.kiln";
  save_model(*compiled, path.string());
  auto model = Model::load(path.string());
  const int64_t weight_kb = int64_t(w->constant().nbytes() / 1024);
  EXPECT_LT(resident_kb_of_mapping(path.string()), weight_kb / 8);
  expect_same_output(*compiled, model->session(), random_tensor({1, 256, 6, 6}, 3));
  EXPECT_LT(resident_kb_of_mapping(path.string()), weight_kb / 8);
  std::filesystem::remove(path);
}

TEST(ModelFile, CallerBuffersAndOutputSizes) {
  auto model = load(model_bytes(false));
  Session session = model->session();
  EXPECT_EQ(session.output_sizes({{2, 3, 8, 8}}), (std::vector<std::vector<int64_t>>{{2, 4, 8, 8}}));
  Tensor x = random_tensor({2, 3, 8, 8}, 4);
  Tensor out = Tensor::empty(DType::F32, {2, 4, 8, 8});
  session.run({x.view()}, {out.view()});
  EXPECT_TRUE(out.same_contents(session.run({x.view()})[0]));
}

TEST(ModelFile, MissingOrUnreadableFileIsInvalidArgument) {
  EXPECT_EQ(code_of([] { Model::load("/nonexistent/model.kiln"); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([] { Model::load(std::filesystem::temp_directory_path().string()); }),
            ErrorCode::InvalidArgument);
}

TEST(ModelFile, BadLoadOptionsAreInvalidArgument) {
  auto bytes = model_bytes(false);
  LoadOptions bad_check;
  bad_check.plan_check = "sometimes";
  EXPECT_EQ(code_of([&] { load(bytes, bad_check); }), ErrorCode::InvalidArgument);
  LoadOptions bad_threads;
  bad_threads.threads = -2;
  EXPECT_EQ(code_of([&] { load(bytes, bad_threads); }), ErrorCode::InvalidArgument);
}

TEST(ModelFile, EveryTruncationIsBadModelFile) {
  auto bytes = model_bytes(false);
  for (size_t size = 0; size < bytes.size(); size += (size < 256 ? 1 : 37)) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(size));
    EXPECT_EQ(code_of([&] { load(cut); }), ErrorCode::BadModelFile) << "size " << size;
  }
}

TEST(ModelFile, CorruptedByteFailsTheChecksum) {
  auto bytes = model_bytes(false);
  bytes[bytes.size() / 2] ^= 0x10;
  EXPECT_EQ(code_of([&] { load(bytes); }), ErrorCode::BadModelFile);
  bytes = model_bytes(false);
  bytes.push_back(0);  // trailing bytes
  EXPECT_EQ(code_of([&] { load(bytes); }), ErrorCode::BadModelFile);
}

TEST(ModelFile, NewerVersionOrUnknownFlagsIsModelFileVersion) {
  auto bytes = model_bytes(false);
  model_file::write_u32(bytes.data() + model_file::kOffVersion, model_file::kFormatVersion + 1);
  fix_checksum(bytes);
  EXPECT_EQ(code_of([&] { load(bytes); }), ErrorCode::ModelFileVersion);
  bytes = model_bytes(false);
  model_file::write_u32(bytes.data() + model_file::kOffFlags, 4);
  fix_checksum(bytes);
  EXPECT_EQ(code_of([&] { load(bytes); }), ErrorCode::ModelFileVersion);
}

TEST(ModelFile, SectionOutsideTheFileIsBadModelFile) {
  const size_t entry_offset = model_file::kHeaderSize + 8;  // first section's offset field
  for (uint64_t offset : {uint64_t(1) << 40, ~uint64_t(0), uint64_t(0)}) {
    auto bytes = model_bytes(false);
    model_file::write_u64(bytes.data() + entry_offset, offset);
    fix_checksum(bytes);
    EXPECT_EQ(code_of([&] { load(bytes); }), ErrorCode::BadModelFile) << offset;
  }
  auto bytes = model_bytes(false);
  model_file::write_u64(bytes.data() + entry_offset + 8, ~uint64_t(0));  // size
  fix_checksum(bytes);
  EXPECT_EQ(code_of([&] { load(bytes); }), ErrorCode::BadModelFile);
  bytes = model_bytes(false);
  model_file::write_u32(bytes.data() + model_file::kOffSectionCount, 1u << 30);
  fix_checksum(bytes);
  EXPECT_EQ(code_of([&] { load(bytes); }), ErrorCode::BadModelFile);
}

// Every single-byte change, with the checksum made valid again so the parsers see it: a coded
// error or a model that loads, never a crash (ASan/UBSan builds check the reads).
TEST(ModelFile, EveryByteMutationLoadsOrGivesACodedError) {
  const auto bytes = model_bytes(false);
  const size_t data_begin = model_file::read_u64(
      bytes.data() + model_file::kHeaderSize + 4 * model_file::kSectionEntrySize + 8);
  size_t loaded = 0, rejected = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i >= model_file::kOffChecksum && i < model_file::kOffChecksum + 4) continue;
    if (i >= data_begin && i % 7 != 0) continue;  // constant bytes: sample them
    for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xFF)}) {
      auto mutated = bytes;
      mutated[i] ^= flip;
      fix_checksum(mutated);
      try {
        LoadOptions quiet;
        quiet.plan_check = "ignore";
        load(mutated, quiet);
        ++loaded;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(loaded, 0u);  // changed constant bytes and names still load
}

// A recorded plan that differs from this build's (another Kiln build or CPU).
TEST(ModelFile, PlanMismatchWarnsOrFailsWhenStrict) {
  auto bytes = model_bytes(false);
  const std::string key = "[kernel ";
  auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(it, bytes.end());
  it[static_cast<ptrdiff_t>(key.size())] = it[static_cast<ptrdiff_t>(key.size())] == 'z' ? 'y' : 'z';
  fix_checksum(bytes);
  auto model = load(bytes);
  EXPECT_NE(model->plan_warning().find("differs"), std::string::npos);
  expect_same_output(*CompiledGraph::compile(*conv_block(false)), model->session(),
                     random_tensor({2, 3, 8, 8}, 5));
  LoadOptions strict;
  strict.plan_check = "strict";
  EXPECT_EQ(code_of([&] { load(bytes, strict); }), ErrorCode::ModelPlanMismatch);
  LoadOptions ignore;
  ignore.plan_check = "ignore";
  EXPECT_TRUE(load(bytes, ignore)->plan_warning().empty());
}

TEST(ModelFile, PlanRecordLinesAreParsedWithoutRegex) {
  auto lines = model_file::plan_kernel_lines("steps:\n  0: y = relu [kernel avx2]\n  x: junk\n"
                                            "  12: z = add [kernel reference]\nmemory plan");
  EXPECT_EQ(lines, (std::vector<std::string>{"y = relu [kernel avx2]", "z = add [kernel reference]"}));
}

}  // namespace
}  // namespace kiln
