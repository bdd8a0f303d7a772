// pelab — command-line entry point. Every error is caught here and printed as one line.
#include <cstring>
#include <iostream>
#include <string>

#include "pelab/pelab.h"

namespace {
const char* kUsage =
    "usage: pelab <command> [options]\n"
    "\n"
    "commands:\n"
    "  demo            train a tiny MLP on XOR with the engine (smoke test)\n"
    "\n"
    "options:\n"
    "  -h, --help      show this help\n"
    "  --version       print the version\n";

int demo() {
  using namespace pelab;
  set_num_threads(2);
  Generator gen(42);
  Linear l1(2, 16, gen), l2(16, 1, gen);
  std::vector<Tensor> params = l1.parameters();
  for (auto& p : l2.parameters()) params.push_back(p);
  AdamW opt(params, 0.05, AdamWOptions{0.9, 0.999, 1e-8, 0.0});
  Tensor x = Tensor::from_vector({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});
  Tensor y = Tensor::from_vector({0, 1, 1, 0}, {4, 1});
  double loss_v = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor h = tanh(l1.forward(x));
    Tensor d = l2.forward(h) - y;
    Tensor loss = mean(d * d);
    opt.zero_grad();
    loss.backward();
    opt.step();
    loss_v = loss.item();
    if (step % 100 == 0) std::cout << "demo: step " << step << " mse " << loss_v << "\n";
  }
  std::cout << "demo: XOR mse after 300 AdamW steps: " << loss_v << "\n";
  return loss_v < 1e-2 ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
      std::cout << kUsage;
      return argc < 2 ? 2 : 0;
    }
    const std::string cmd = argv[1];
    if (cmd == "--version") {
      std::cout << "pelab " << pelab::version() << "\n";
      return 0;
    }
    if (cmd == "demo") return demo();
    std::cerr << "pelab: unknown command '" << cmd << "' (see pelab --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "pelab: error: " << e.what() << "\n";
    return 1;
  }
}
