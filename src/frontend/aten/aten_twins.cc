// ATen ops that convert exactly as another does, each registered under the other's converter:
// the *_copy twins of the views (aten.view_copy, aten.permute_copy, ...), which functionalized and
// exported graphs hold in place of the views (a Kiln value is never aliased), and the unsafe_
// twins of split, which differ only in autograd's aliasing checks. Registered last
// (src/frontend/converter_list.inc), after the ops they copy.
#include <string>
#include <utility>

#include "frontend/converter.h"
#include "kiln/error.h"

namespace kiln {

void register_aten_twins_converters(ConverterRegistry& r) {
  std::vector<std::pair<std::string, std::string>> twins = {
      {"split.Tensor", "unsafe_split.Tensor"},
      {"split_with_sizes.default", "unsafe_split_with_sizes.default"}};
  for (const std::string view :
       {"view.default", "permute.default", "transpose.int", "t.default", "squeeze.default",
        "squeeze.dim", "squeeze.dims", "unsqueeze.default", "expand.default", "alias.default",
        "detach.default", "unbind.int", "split.Tensor", "split_with_sizes.default",
        "unfold.default", "as_strided.default", "slice.Tensor", "select.int", "narrow.default",
        "diagonal.default"}) {
    const size_t dot = view.find('.');
    twins.emplace_back(view, view.substr(0, dot) + "_copy" + view.substr(dot));
  }
  for (const auto& [original, twin] : twins) {
    const Converter* converter = r.find("aten." + original);
    KILN_ASSERT(converter, "no converter for aten." << original << " to copy");
    r.add("aten." + twin, *converter);
  }
}

}  // namespace kiln
