#include "kiln/error.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace kiln {

std::string_view error_code_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return "E10001";
    case ErrorCode::InputCount: return "E10002";
    case ErrorCode::InputDType: return "E10003";
    case ErrorCode::InputShape: return "E10004";
    case ErrorCode::InputBuffer: return "E10005";
    case ErrorCode::ParseError: return "E10010";
    case ErrorCode::BadModelFile: return "E10020";
    case ErrorCode::ModelFileVersion: return "E10021";
    case ErrorCode::ModelPlanMismatch: return "E10022";
    case ErrorCode::DumpFailed: return "E10030";
    case ErrorCode::DynamicShapeRange: return "E20008";
    case ErrorCode::FormatMismatch: return "E30012";
    case ErrorCode::InvalidGraph: return "E40001";
    case ErrorCode::ShapeInference: return "E40002";
    case ErrorCode::UnsupportedOperator: return "E50001";
    case ErrorCode::OutOfMemory: return "E60003";
  }
  return "E19999";
}

Error::Error(ErrorCode code, const std::string& message, std::string fx_node)
    : std::runtime_error(std::string(error_code_string(code)).append(": ").append(message)),
      code_(code),
      detail_(message),
      fx_node_(std::move(fx_node)) {}

void assertion_failed(const char* condition, const char* file, int line,
                      const std::string& message) {
  std::fprintf(stderr, "Kiln internal error: assertion '%s' failed at %s:%d%s%s\n", condition,
               file, line, message.empty() ? "" : ": ", message.c_str());
  std::fprintf(stderr, "This is a bug in Kiln; please report it with the graph that caused it.\n");
  std::abort();
}

}  // namespace kiln
