// models/pe/layer_params.h: the per-layer parameters of shaw, t5 (pe.t5_per_layer) and cope keep
// their checkpoint names "layers.<i>.<name>", and an attention site's layer out of range is one
// error line naming the scheme.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/pe/layer_params.h"
#include "models/pe/pe.h"
#include "tests/pe_test_util.h"

namespace pelab::models {
namespace {

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> v;
  for (const auto& p : m.named_parameters()) v.push_back(p.first);
  return v;
}

TEST(LayerParams, SchemesKeepTheirPerLayerNames) {
  const StackInfo s = pelab::testing::stack_of(StackKind::Encoder, 2, 8, 2);
  Generator gen(1);
  PEConfig shaw = pelab::testing::small_pe("shaw");
  EXPECT_EQ(names_of(*make_pe(shaw, s, gen)),
            (std::vector<std::string>{"layers.0.rel_k", "layers.0.rel_v", "layers.1.rel_k",
                                      "layers.1.rel_v"}));
  PEConfig t5 = pelab::testing::small_pe("t5");
  EXPECT_EQ(names_of(*make_pe(t5, s, gen)), (std::vector<std::string>{"rel_bias"}));
  t5.set("t5_per_layer", true);
  EXPECT_EQ(names_of(*make_pe(t5, s, gen)),
            (std::vector<std::string>{"layers.0.rel_bias", "layers.1.rel_bias"}));
  EXPECT_EQ(names_of(*make_pe(pelab::testing::small_pe("cope"), s, gen)),
            (std::vector<std::string>{"layers.0.pos_emb", "layers.1.pos_emb"}));
}

TEST(LayerParams, LayerOutOfRangeIsOneErrorNamingTheScheme) {
  const std::vector<int64_t> p = {0, 1, 2};
  for (int64_t bad : {int64_t{-1}, int64_t{2}}) {
    const AttnSite site = pelab::testing::site_of(AttnKind::EncoderSelf, p, p, false, bad);
    try {
      (void)layer_index("shaw", site, 2);
      ADD_FAILURE() << "layer " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "shaw: layer " + std::to_string(bad) +
                                           " out of range (stack has 2 layers)");
    }
  }
  const AttnSite ok = pelab::testing::site_of(AttnKind::EncoderSelf, p, p, false, 1);
  EXPECT_EQ(layer_index("cope", ok, 2), 1u);
  // Through a scheme: a shaw stack of 2 layers asked for layer 5.
  const StackInfo s = pelab::testing::stack_of(StackKind::Encoder, 2, 8, 2);
  Generator gen(1);
  auto pe = make_pe(pelab::testing::small_pe("shaw"), s, gen);
  const AttnSite far = pelab::testing::site_of(AttnKind::EncoderSelf, p, p, false, 5);
  try {
    (void)pe->relative_tables(far);
    ADD_FAILURE() << "layer 5 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shaw: layer 5 out of range (stack has 2 layers)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pelab::models
