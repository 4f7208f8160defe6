// Writes the seed corpus of the loader fuzz target (tests/fuzz/corpus): small valid models of
// several kinds, plus truncated and byte-flipped copies of them. Usage: kiln_fuzz_corpus DIR
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/model.h"

namespace {

kiln::Tensor filled(std::vector<int64_t> sizes, float start) {
  kiln::Tensor t = kiln::Tensor::empty(kiln::DType::F32, std::move(sizes));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + 0.25f * float(i % 8);
  return t;
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> models() {
  using namespace kiln;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  {  // static conv + bias + relu
    Graph g("conv");
    Value* x = g.add_input("x", TensorType{DType::F32, make_shape({1, 2, 4, 4})});
    Value* w = g.add_constant("w", filled({3, 2, 3, 3}, -1));
    Value* b = g.add_constant("b", filled({1, 3, 1, 1}, 0));
    g.set_outputs({g.add("relu", {g.add("add", {g.add("conv2d", {x, w}), b})})});
    out.emplace_back("conv", serialize_model(*CompiledGraph::compile(g)));
  }
  {  // symbolic batch, matmul, two outputs
    Graph g("mlp");
    Dim batch = g.add_symbol("B", 1, 16);
    Value* x = g.add_input("x", TensorType{DType::F32, {batch, Dim(4)}});
    Value* w = g.add_constant("w", filled({4, 4}, -0.5f));
    Value* h = g.add("matmul", {x, w});
    g.set_outputs({g.add("relu", {h}), h});
    ModelMetadata meta;
    meta.torch_version = "2.13.0";
    meta.properties["source"] = "corpus";
    out.emplace_back("mlp_symbolic", serialize_model(*CompiledGraph::compile(g), meta));
  }
  {  // no constants, elementwise on two inputs, reference kernels
    Graph g("add");
    Value* a = g.add_input("a", TensorType{DType::F32, make_shape({8})});
    Value* c = g.add_input("c", TensorType{DType::F32, make_shape({8})});
    g.set_outputs({g.add("add", {a, c})});
    CompileOptions o;
    o.kernel_policy = "reference";
    out.emplace_back("add_reference", serialize_model(*CompiledGraph::compile(g, o)));
  }
  return out;
}

void write(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kiln_fuzz_corpus DIR\n";
    return 2;
  }
  std::string dir = argv[1];
  for (const auto& [name, bytes] : models()) {
    write(dir + "/" + name + ".kiln", bytes);
    write(dir + "/" + name + "_truncated_header.kiln",
          std::vector<uint8_t>(bytes.begin(), bytes.begin() + 40));
    write(dir + "/" + name + "_truncated_half.kiln",
          std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(bytes.size() / 2)));
    std::vector<uint8_t> flipped = bytes;
    flipped[flipped.size() / 3] ^= 0x5A;
    write(dir + "/" + name + "_flipped.kiln", flipped);
  }
  return 0;
}
