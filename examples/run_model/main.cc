// Loads a .kiln model and runs it once on caller buffers, using only Kiln's installed public
// headers (include/kiln/model.h). Usage:
//   run_model MODEL.kiln        run a model (symbolic dims at the smallest of their range)
//   run_model --make OUT.kiln   first write a small conv model built with the C++ graph API
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/model.h"

static void make_model(const std::string& path) {
  kiln::Graph g("example");
  kiln::Value* x = g.add_input("x", kiln::TensorType{kiln::DType::F32, kiln::make_shape({1, 3, 8, 8})});
  kiln::Tensor w = kiln::Tensor::zeros(kiln::DType::F32, {4, 3, 1, 1});
  for (int o = 0; o < 4; ++o) w.data<float>()[o * 3 + o % 3] = 1.0f;  // output o copies channel o % 3
  g.set_outputs({g.add("relu", {g.add("conv2d", {x, g.add_constant("w", w)})})});
  kiln::save_model(*kiln::CompiledGraph::compile(g), path);
}

int main(int argc, char** argv) {
  try {
    std::string path = argc == 3 && std::strcmp(argv[1], "--make") == 0 ? argv[2]
                       : argc == 2                                       ? argv[1]
                                                                         : "";
    if (path.empty()) {
      std::fprintf(stderr, "usage: run_model [--make] MODEL.kiln\n");
      return 2;
    }
    if (argc == 3) make_model(path);

    auto model = kiln::Model::load(path);
    kiln::Session session = model->session();
    std::vector<kiln::Tensor> inputs;
    std::vector<std::vector<int64_t>> sizes;
    for (const kiln::ModelIO& in : model->inputs()) {
      std::vector<int64_t> s = in.sizes;
      for (size_t d = 0; d < s.size(); ++d)
        for (const kiln::Symbol& sym : model->symbols())
          if (s[d] < 0 && sym.name == in.dim_names[d]) s[d] = sym.min;
      inputs.push_back(kiln::Tensor::zeros(in.dtype, s));
      if (in.dtype == kiln::DType::F32)
        for (int64_t i = 0; i < inputs.back().numel(); ++i)
          inputs.back().data<float>()[i] = float(i % 5) - 2.0f;
      sizes.push_back(s);
    }
    std::vector<kiln::TensorView> in_views, out_views;
    for (const kiln::Tensor& t : inputs) in_views.push_back(t.view());
    std::vector<kiln::Tensor> outputs;
    auto out_sizes = session.output_sizes(sizes);
    for (size_t j = 0; j < out_sizes.size(); ++j) {
      outputs.push_back(kiln::Tensor::empty(model->outputs()[j].dtype, out_sizes[j]));
      out_views.push_back(outputs.back().view());
    }
    session.run(in_views, out_views);  // the caller's buffers, no copies
    for (size_t j = 0; j < outputs.size(); ++j) {
      double sum = 0;
      if (outputs[j].dtype() == kiln::DType::F32)
        for (int64_t i = 0; i < outputs[j].numel(); ++i) sum += outputs[j].data<float>()[i];
      std::printf("%s %s sum=%g\n", model->outputs()[j].name.c_str(),
                  kiln::shape_string(out_sizes[j]).c_str(), sum);
    }
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "run_model: %s\n", e.what());
    return 1;
  }
}
