// Lexical rules shared by the textual IR's printer and parser (docs/ir.md).
#pragma once

namespace kiln {

// Characters of an unquoted %value, @node, symbol or attribute name.
inline bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.';
}

}  // namespace kiln
