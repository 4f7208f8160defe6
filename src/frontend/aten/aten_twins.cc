// The *_copy twins of the view ops (aten.view_copy, aten.permute_copy, ...), which functionalized
// and exported graphs hold in place of the views: a Kiln value is never aliased, so each converts
// as its view does. Registered last (src/frontend/converter_list.inc), after the views.
#include <string>

#include "frontend/converter.h"
#include "kiln/error.h"

namespace kiln {

void register_aten_copy_variants_converters(ConverterRegistry& r) {
  for (const std::string view :
       {"view.default", "permute.default", "transpose.int", "t.default", "squeeze.default",
        "squeeze.dim", "squeeze.dims", "unsqueeze.default", "expand.default", "alias.default",
        "detach.default", "unbind.int", "split.Tensor", "split_with_sizes.default",
        "unfold.default", "as_strided.default", "slice.Tensor", "select.int", "narrow.default",
        "diagonal.default"}) {
    const Converter* converter = r.find("aten." + view);
    KILN_ASSERT(converter, "no converter for aten." << view << " to copy");
    const size_t dot = view.find('.');
    r.add("aten." + view.substr(0, dot) + "_copy" + view.substr(dot), *converter);
  }
}

}  // namespace kiln
