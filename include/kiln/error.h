// Kiln's two error channels:
//  * kiln::Error — a coded, user-facing error for anything a user, an input or a file can cause.
//    Every code is listed in docs/errors.md; the message says what, where and how to fix it.
//  * KILN_ASSERT — a broken internal invariant: a bug in Kiln, never caused by user input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

enum class ErrorCode {
  InvalidArgument,      // E10001: an API argument or option is invalid
  InputCount,           // E10002: wrong number of inputs or outputs passed to a run
  InputDType,           // E10003: an input's dtype differs from the compiled graph's
  InputShape,           // E10004: an input's rank or shape differs from the compiled graph's
  InputBuffer,          // E10005: null, misaligned or non-contiguous data buffer
  ParseError,           // E10010: the textual IR could not be parsed
  BadModelFile,         // E10020: a model file is malformed, truncated or corrupted
  ModelFileVersion,     // E10021: a model file of a newer format version or with unknown flags
  ModelPlanMismatch,    // E10022: a model's recorded plan differs from this build's (strict load)
  DumpFailed,           // E10030: a graph dump can't be written (its folder, or Graphviz's dot)
  DynamicShapeRange,    // E20008: a dynamic dimension is outside its declared range
  FormatMismatch,       // E30012: two nodes need incompatible tensor formats
  InvalidGraph,         // E40001: the graph breaks a structural rule (verifier)
  ShapeInference,       // E40002: an op can't take the shapes, dtypes or attributes it was given
  UnsupportedOperator,  // E50001: no op, or no kernel, for a node
  OutOfMemory,          // E60003: an allocation failed
};

// "E50001" etc.
std::string_view error_code_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, std::string fx_node = "");
  ErrorCode code() const { return code_; }
  // The message without the "E50001: " prefix.
  const std::string& detail() const { return detail_; }
  // The FX node whose conversion raised it, when importing an FX graph did ("" otherwise): the
  // backend leaves that node to PyTorch and partitions again.
  const std::string& fx_node() const { return fx_node_; }

 private:
  ErrorCode code_;
  std::string detail_;
  std::string fx_node_;
};

// Builds a message with operator<< and throws it:  throw_error(ErrorCode::X, "a ", 1, " b");
template <typename... Parts>
[[noreturn]] void throw_error(ErrorCode code, const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  throw Error(code, out.str());
}

[[noreturn]] void assertion_failed(const char* condition, const char* file, int line,
                                   const std::string& message);

}  // namespace kiln

// An invariant of Kiln itself. Checked in every build: a wrong answer is worse than an abort.
#define KILN_ASSERT(cond, ...)                                                          \
  do {                                                                                  \
    if (!(cond)) [[unlikely]] {                                                         \
      std::ostringstream kiln_assert_msg_;                                              \
      kiln_assert_msg_ << "" __VA_OPT__(<< __VA_ARGS__);                                \
      ::kiln::assertion_failed(#cond, __FILE__, __LINE__, kiln_assert_msg_.str());      \
    }                                                                                   \
  } while (0)
