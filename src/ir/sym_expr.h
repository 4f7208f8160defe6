// Integer expressions over a graph's symbols, as PyTorch prints its symbolic sizes: "s0",
// "s0*s1", "128*s0", "s1 + 1", "(s0//2)". Op attributes hold them where a size is symbolic
// (reshape's sym_shape, expand's sym_size, slice's sym_end) so that one graph serves every
// shape; inference evaluates them with the symbols bound to a run's sizes (docs/dynamic-shapes.md).
//
// Grammar: expr := term (('+' | '-') term)*; term := power (('*' | '//') power)*;
//          power := atom ('**' INT)?;
//          atom := INT | SYMBOL | ('Mod' | 'Max' | 'Min') '(' expr ',' expr ')' | '(' expr ')'.
// Mod is Python's (the divisor's sign). Anything else is rejected with the reason.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/shape.h"

namespace kiln {

class Value;

class SymExpr {
 public:
  // Throws E10010 naming the expression and what is wrong with it.
  static SymExpr parse(const std::string& text);

  // The names of the symbols it reads, in order of first appearance.
  std::vector<std::string> symbol_names() const;
  // Its value with each symbol read through `value_of` (nullopt: unbound); nullopt when a
  // symbol is unbound, a division by zero, or an int64 overflow.
  std::optional<int64_t> evaluate(
      const std::function<std::optional<int64_t>(const std::string&)>& value_of) const;
  // Its range when each symbol ranges over [min, max] (interval arithmetic, clamped at 0 below).
  std::pair<int64_t, int64_t> range(
      const std::function<std::pair<int64_t, int64_t>(const std::string&)>& range_of) const;
  // A lone symbol's name ("s0"), or empty.
  std::string single_symbol() const;

  // constant + Σ coefficient·symbol: the form of an expression linear in its symbols.
  struct Linear {
    int64_t constant = 0;
    std::map<std::string, int64_t> coefficients;  // none zero
  };
  // Its linear form when it is built of integers, symbols, sums, differences and products
  // with at least one constant factor; nullopt otherwise or on an int64 overflow.
  std::optional<Linear> linear() const;

  enum class Op { Add, Sub, Mul, FloorDiv, Mod, Max, Min };
  // The expression rebuilt bottom-up through the callbacks (leaves, then each operation on its
  // operands' results): how the frontend turns a size PyTorch passes as a number into nodes.
  Value* fold(const std::function<Value*(int64_t)>& integer,
              const std::function<Value*(const std::string&)>& symbol,
              const std::function<Value*(Op, Value*, Value*)>& apply) const;

  struct Node;

 private:
  std::shared_ptr<const Node> root_;
};

// The dim an expression denotes in `symbols`: static when every symbol it reads is bound (or it
// reads none), the symbol itself when it is one, otherwise a derived symbol named by the text,
// with its range from interval arithmetic. Reports problems through `fail`, which must throw.
Dim resolve_sym_dim(const std::string& text, SymbolTable& symbols,
                    const std::function<void(const std::string&)>& fail);

}  // namespace kiln
