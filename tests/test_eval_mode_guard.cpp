// pelab — EvalModeGuard (framework/include/pelab/nn.h): evaluation mode for a scope, the previous
// mode restored afterwards, on an exception too (the one guard evaluate, compare's random-position
// evaluation and greedy decoding use).
#include <gtest/gtest.h>

#include <stdexcept>

#include "pelab/nn.h"

namespace {

using pelab::EvalModeGuard;
using pelab::Linear;

TEST(EvalModeGuard, EvaluatesInsideAndRestoresTheModeAfter) {
  pelab::Generator gen(1);
  Linear m(2, 2, gen);
  m.train();
  {
    EvalModeGuard g(m);
    EXPECT_FALSE(m.is_training());
  }
  EXPECT_TRUE(m.is_training());
  m.eval();
  {
    EvalModeGuard g(m);
    EXPECT_FALSE(m.is_training());
  }
  EXPECT_FALSE(m.is_training());  // was in eval mode: stays there
}

TEST(EvalModeGuard, RestoresTheModeWhenTheScopeThrows) {
  pelab::Generator gen(1);
  Linear m(2, 2, gen);
  m.train();
  EXPECT_THROW(
      {
        EvalModeGuard g(m);
        throw std::runtime_error("evaluation failed");
      },
      std::runtime_error);
  EXPECT_TRUE(m.is_training());
}

}  // namespace
