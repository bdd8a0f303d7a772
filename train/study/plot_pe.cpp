// pelab — `pelab plot-pe`: pictures of the positional encodings from pelab's own modules and from a
// trained checkpoint (plot_pe.h).
#include "train/study/plot_pe.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <complex>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "data/batch.h"
#include "data/error.h"
#include "data/tasks.h"
#include "models/pe/pe.h"
#include "models/transformer.h"
#include "pelab/autograd.h"
#include "pelab/ops.h"
#include "pelab/parallel.h"
#include "pelab/strings.h"
#include "train/command_line.h"
#include "train/config.h"
#include "train/memory_estimate.h"
#include "train/metrics.h"
#include "train/evaluate.h"
#include "train/study/report.h"
#include "train/task_data.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace pelab {

namespace {

// The task's IDs of one example's prompt and n generated tokens, both levels where it has two.
models::Positions example_task_positions(const data::Example& ex, int64_t n) {
  std::vector<int64_t> ids = data::decoder_position_ids(ex, n), ids2;
  if (ex.has_second_positions()) ids2 = data::decoder_position_ids(ex, n, 2);
  const int64_t len = static_cast<int64_t>(ids.size());
  return models::Positions(1, len, std::move(ids), std::move(ids2));
}

using models::AttnKind;
using models::AttnSite;
using models::PositionalEncoding;
using models::StackInfo;
using models::StackKind;

std::string num(double v) { return format_double(v, 8); }

// A 2-D table written as a whitespace matrix (.dat, rows = y) and a long CSV.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

std::string matrix_dat(const Matrix& m) {
  std::string s;
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) s += (c ? " " : "") + num(m.at(r, c));
    s += "\n";
  }
  return s;
}

double max_abs(const Matrix& m) {
  double a = 0;
  for (double x : m.v) a = std::max(a, std::fabs(x));
  return a > 0 ? a : 1.0;
}

std::string terminal(int w, int h) {
  if (gnuplot_png_terminal() == "pngcairo")
    return "set terminal pngcairo size " + std::to_string(w) + "," + std::to_string(h) +
           " noenhanced font 'Sans,10'\n";
  return "set terminal png size " + std::to_string(w) + "," + std::to_string(h) + " noenhanced\n";
}

const char* kDiverging = "set palette defined (0 '#2166ac', 0.5 '#f7f7f7', 1 '#b2182b')\n";
const char* kSequential =
    "set palette defined (0 '#ffffff', 0.3 '#9ecae1', 0.7 '#3182bd', 1 '#08306b')\n";

class Plotter {
 public:
  Plotter(const PlotPeOptions& opt, PlotPeResult& res) : opt_(opt), res_(res) {
    std::error_code ec;
    fs::create_directories(opt.out, ec);
    PELAB_CHECK(!ec, "plot-pe: cannot create ", opt.out, ": ", ec.message());
    can_plot_ = opt.plots && !gnuplot_path().empty();
    if (opt.plots && !can_plot_) res_.note = "gnuplot not found: CSV/.dat files only";
    if (!opt.plots) res_.note = "plots disabled";
  }
  std::string path(const std::string& name) const { return (fs::path(opt_.out) / name).string(); }
  void data(const std::string& name, const std::string& text) {
    write_text_file(path(name), text);
    res_.csvs.push_back(path(name));
  }
  void plot(const std::string& stem, const std::string& script) {
    if (!can_plot_) return;
    std::string err;
    if (run_gnuplot(path(stem + ".png"), script, &err))
      res_.pngs.push_back(path(stem + ".png"));
    else
      res_.failed.push_back(err);
  }

 private:
  const PlotPeOptions& opt_;
  PlotPeResult& res_;
  bool can_plot_ = false;
};

std::vector<int64_t> iota(int64_t n, int64_t from = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
  return v;
}

// ---------------- pictures of a PE object, asked through its hooks ----------------
// Nothing here names a scheme: every picture is what a hook of models/pe/pe.h returns for a probe
// (zeros through hook 1, a query row's term from hook 3 or its table form, constant q = k through
// hook 2), so a new scheme file is drawn with no edit here.

// Series against one x column: stem.csv (header "x_name,name...", a row per x) and stem.dat (the
// same numbers space-separated, for gnuplot); cols[c][i] is column c's value at x[i].
void series_files(Plotter& p, const std::string& stem, const std::string& x_name,
                  const std::vector<std::string>& names, const std::vector<int64_t>& x,
                  const std::vector<std::vector<double>>& cols) {
  std::string csv = x_name, dat;
  for (const auto& n : names) csv += "," + csv_field(n);
  csv += "\n";
  for (size_t i = 0; i < x.size(); ++i) {
    csv += std::to_string(x[i]);
    dat += std::to_string(x[i]);
    for (const auto& c : cols) {
      csv += "," + num(c[i]);
      dat += " " + num(c[i]);
    }
    csv += "\n";
    dat += "\n";
  }
  p.data(stem + ".csv", csv);
  p.data(stem + ".dat", dat);
}

// Hook 1 on x = 0 at positions 0..P-1: the table PE[position, dim] and the cosine similarity of
// the positions' vectors.
void embedding_picture(Plotter& p, const std::string& stem, const std::string& label,
                       PositionalEncoding& pe, int64_t P, int64_t D, DType dt, Device dev) {
  Tensor x = Tensor::zeros({1, P, D}, dt, dev);
  const std::vector<double> v = pe.embed(x, iota(P)).to_vector();
  const Matrix m{P, D, v};
  Matrix cs{P, P, std::vector<double>(static_cast<size_t>(P * P))};
  std::vector<double> norm(static_cast<size_t>(P));
  for (int64_t i = 0; i < P; ++i) {
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += m.at(i, d) * m.at(i, d);
    norm[static_cast<size_t>(i)] = std::sqrt(s) + 1e-12;
  }
  for (int64_t i = 0; i < P; ++i)
    for (int64_t j = 0; j < P; ++j) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += m.at(i, d) * m.at(j, d);
      cs.v[static_cast<size_t>(i * P + j)] =
          s / (norm[static_cast<size_t>(i)] * norm[static_cast<size_t>(j)]);
    }
  std::string csv = "position";
  for (int64_t d = 0; d < D; ++d) csv += ",dim" + std::to_string(d);
  csv += "\n";
  for (int64_t r = 0; r < P; ++r) {
    csv += std::to_string(r);
    for (int64_t d = 0; d < D; ++d) csv += "," + num(m.at(r, d));
    csv += "\n";
  }
  p.data(stem + ".csv", csv);
  p.data(stem + ".dat", "# table\n" + matrix_dat(m) + "\n\n# cosine similarity\n" + matrix_dat(cs));
  std::string gp = terminal(1200, 560);
  gp += "set multiplot layout 1,2 title " +
        gnuplot_quote(label + ": hook 1 (added to the embedding)") + "\n" + kDiverging;
  const double a = max_abs(m);
  gp += "set title 'PE[position, dim]'\nset xlabel 'dim'\nset ylabel 'position'\n";
  gp += "set cbrange [" + num(-a) + ":" + num(a) + "]\nset xrange [-0.5:" + std::to_string(D) +
        "-0.5]\nset yrange [" + std::to_string(P) + "-0.5:-0.5]\n";
  gp += "plot " + gnuplot_quote(stem + ".dat") + " index 0 matrix with image notitle\n";
  gp += "set title 'cosine similarity of positions'\nset xlabel 'position'\nset cbrange [-1:1]\n";
  gp += "set xrange [-0.5:" + std::to_string(P) + "-0.5]\n";
  gp += "plot " + gnuplot_quote(stem + ".dat") + " index 1 matrix with image notitle\n";
  gp += "unset multiplot\n";
  p.plot(stem, gp);
}

// Hook 3 in table form (relative_tables): each layer's key and value tables, rows = relative
// index, labelled by the relative positions (key - query) of the probe query that use each row.
bool tables_picture(Plotter& p, const std::string& stem, const std::string& label,
                    PositionalEncoding& pe, const StackInfo& si, int64_t P) {
  const std::vector<int64_t> pos = iota(P);
  const int64_t qi = si.kind == StackKind::Decoder ? P - 1 : P / 2;
  std::vector<std::pair<std::string, Matrix>> mats;  // title -> [R, dh]
  std::map<int64_t, std::pair<int64_t, int64_t>> rows_rel;  // row -> (min, max) key - query
  for (int64_t l = 0; l < si.layers; ++l) {
    AttnSite site;
    site.kind = si.kind == StackKind::Decoder ? AttnKind::DecoderSelf : AttnKind::EncoderSelf;
    site.causal = si.kind == StackKind::Decoder;
    site.layer = l;
    site.q_pos = pos;
    site.k_pos = pos;
    const PositionalEncoding::RelativeTables t = pe.relative_tables(site);
    if (!t.index.defined()) continue;
    if (l == 0) {
      const std::vector<double> idx = t.index.to_vector();
      for (int64_t j = 0; j < P; ++j) {
        const auto r = static_cast<int64_t>(idx[static_cast<size_t>(qi * P + j)]);
        auto it = rows_rel.find(r);
        if (it == rows_rel.end())
          rows_rel[r] = {j - qi, j - qi};
        else
          it->second = {std::min(it->second.first, j - qi), std::max(it->second.second, j - qi)};
      }
    }
    for (const auto& [kind, tab] : {std::pair<std::string, Tensor>{"keys", t.keys}, {"values", t.values}}) {
      if (!tab.defined()) continue;
      const std::vector<double> w = tab.to_vector();
      Matrix m;
      m.rows = tab.size(tab.dim() - 2);
      m.cols = tab.size(tab.dim() - 1);
      m.v.assign(static_cast<size_t>(m.rows * m.cols), 0.0);
      const int64_t H = tab.dim() == 3 ? tab.size(0) : 1;  // per head: the mean over heads
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < m.rows * m.cols; ++i)
          m.v[static_cast<size_t>(i)] += w[static_cast<size_t>(h * m.rows * m.cols + i)] / H;
      mats.emplace_back("layer " + std::to_string(l) + " " + kind +
                            (H > 1 ? " (mean over heads)" : ""), m);
    }
  }
  if (mats.empty()) return false;
  auto rel = [&](int64_t r) {
    auto it = rows_rel.find(r);
    if (it == rows_rel.end()) return std::string("unused");
    return it->second.first == it->second.second
               ? std::to_string(it->second.first)
               : std::to_string(it->second.first) + ".." + std::to_string(it->second.second);
  };
  std::string csv = "table,row,relative_positions,dim,value\n", dat;
  for (const auto& [title, m] : mats) {
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < m.cols; ++c)
        csv += csv_field(title) + "," + std::to_string(r) + "," + rel(r) + "," + std::to_string(c) + "," +
               num(m.at(r, c)) + "\n";
    dat += "# " + title + "\n" + matrix_dat(m) + "\n\n";
  }
  p.data(stem + ".csv", csv);
  p.data(stem + ".dat", dat);
  const size_t rows = (mats.size() + 1) / 2;
  std::string gp = terminal(1100, static_cast<int>(320 * rows + 60)) + kDiverging;
  gp += "set multiplot layout " + std::to_string(rows) + ",2 title " +
        gnuplot_quote(label +
                      ": hook 3/4 tables (rows: relative index; row r is used for key - query " +
                      rel(0) + " ... " + rel(mats.front().second.rows - 1) + ")") +
        "\n";
  for (size_t i = 0; i < mats.size(); ++i) {
    const Matrix& m = mats[i].second;
    const double a = max_abs(m);
    gp += "set title " + gnuplot_quote(mats[i].first) + "\nset cbrange [" + num(-a) + ":" +
          num(a) + "]\n";
    gp += "set xrange [-0.5:" + std::to_string(m.cols) + "-0.5]\nset yrange [" +
          std::to_string(m.rows) + "-0.5:-0.5]\nset xlabel 'dim'\nset ylabel 'row'\n";
    gp += "plot " + gnuplot_quote(stem + ".dat") + " index " + std::to_string(i) +
          " matrix with image notitle\n";
  }
  gp += "unset multiplot\n";
  p.plot(stem, gp);
  return true;
}

// Hook 3 on self-attention over positions 0..P-1: the term each head adds for one query (the last
// one when causal, the middle one otherwise) against the relative position key - query, per layer
// (layers whose terms are equal are drawn once), through keyed_score_term as attention calls it. A
// term that depends on the query is drawn for q = (1, ..., 1), one that depends on the keys too
// (CoPE's gates) for k = q, and the title says so.
void bias_picture(Plotter& p, const std::string& stem, const std::string& label,
                  PositionalEncoding& pe, const StackInfo& si, int64_t P, Device dev) {
  const std::vector<int64_t> pos = iota(P);
  const bool causal = si.kind == StackKind::Decoder;
  const int64_t qi = causal ? P - 1 : P / 2, H = si.heads, dh = si.head_dim();
  const int64_t j_end = causal ? qi + 1 : P;
  bool query_dependent = false, key_dependent = false;
  std::vector<std::vector<double>> per_layer;  // [layer][h * n + j]
  for (int64_t l = 0; l < si.layers; ++l) {
    AttnSite site;
    site.kind = causal ? AttnKind::DecoderSelf : AttnKind::EncoderSelf;
    site.causal = causal;
    site.layer = l;
    site.q_pos = pos;
    site.k_pos = pos;
    auto term_for = [&](const Tensor& q, const Tensor& k) -> std::vector<double> {
      Tensor t = pe.keyed_score_term(q, k, Tensor(), site);
      if (!t.defined()) return {};
      const std::vector<double> v = (t + Tensor::zeros({1, H, P, P}, si.dtype, dev)).to_vector();
      std::vector<double> row;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < j_end; ++j) row.push_back(v[static_cast<size_t>((h * P + qi) * P + j)]);
      return row;
    };
    const Tensor zeros = Tensor::zeros({1, H, P, dh}, si.dtype, dev);
    const Tensor ones = Tensor::ones({1, H, P, dh}, si.dtype, dev);
    std::vector<double> z = term_for(zeros, zeros);
    if (z.empty()) return;
    const std::vector<double> o = term_for(ones, ones);
    if (o != z) query_dependent = true;
    if (o != term_for(ones, zeros)) key_dependent = true;
    per_layer.push_back(query_dependent ? o : z);
  }
  if (per_layer.empty()) return;
  bool same = true;
  for (const auto& v : per_layer) same = same && v == per_layer.front();
  const int64_t n = j_end;
  for (size_t l = 0; l < (same ? 1 : per_layer.size()); ++l) {
    const std::string st = stem + (same ? "" : "_layer" + std::to_string(l));
    std::vector<std::string> heads;
    std::vector<std::vector<double>> cols(static_cast<size_t>(H));
    for (int64_t h = 0; h < H; ++h) {
      heads.push_back("head" + std::to_string(h + 1));
      const auto from = per_layer[l].begin() + h * n;
      cols[static_cast<size_t>(h)].assign(from, from + n);
    }
    series_files(p, st, "relative_position", heads, iota(n, -qi), cols);
    std::string gp = terminal(1000, 600);
    gp += "set title " +
          gnuplot_quote(label + ": hook 3, the term added to the attention score (" +
                        (same ? (si.layers > 1 ? std::string("every layer") : std::string("layer 0"))
                              : "layer " + std::to_string(l)) +
                        (causal ? ", causal, last query" : ", bidirectional, middle query") +
                        (key_dependent ? ", q = k = (1,...,1)"
                                       : query_dependent ? ", q = (1,...,1)" : "") +
                        ")") +
          "\n";
    gp += "set xlabel 'relative position (key - query)'\nset ylabel 'score term'\nset grid\n";
    gp += "set key outside right\nplot ";
    for (int64_t h = 0; h < H; ++h)
      gp += std::string(h ? ", " : "") + gnuplot_quote(st + ".dat") + " using 1:" +
            std::to_string(h + 2) + " with lines lw 2 title 'head " + std::to_string(h + 1) + "'";
    gp += "\n";
    p.plot(st, gp);
  }
}

// Hook 2 on constant q = k = (1, ..., 1), the query at position N and keys at N - r, r = 0..N: the score
// q'.k'/dh against the distance, averaged over heads — a rotary scheme's long-range behaviour. The
// scheme's eval-time variants (PEScheme::variants, e.g. RoPE's scalings) are drawn next to it
// with factor 4 and training length N/4, each from a fresh module in evaluation mode, when the
// scheme has no trained parameters. Nothing is written when hook 2 changes nothing.
void rotation_picture(Plotter& p, const std::string& stem, const std::string& label,
                      PositionalEncoding& pe, const models::PEConfig& pc, const StackInfo& si,
                      int64_t N, Device dev) {
  const int64_t H = si.heads, dh = si.head_dim();
  // The query at position N and key r at N - r (the keys a causal query sees, r = its distance).
  const std::vector<int64_t> qp = {N};
  std::vector<int64_t> kp(static_cast<size_t>(N + 1));
  for (int64_t r = 0; r <= N; ++r) kp[static_cast<size_t>(r)] = N - r;
  auto scores = [&](PositionalEncoding& m) -> std::vector<double> {
    Tensor q = Tensor::ones({1, H, 1, dh}, si.dtype, dev);
    Tensor k = Tensor::ones({1, H, N + 1, dh}, si.dtype, dev);
    AttnSite site;
    site.kind = si.kind == StackKind::Decoder ? AttnKind::DecoderSelf : AttnKind::EncoderSelf;
    site.q_pos = qp;
    site.k_pos = kp;
    m.transform_qk(q, k, site);
    const std::vector<double> qv = q.to_vector(), kv = k.to_vector();
    std::vector<double> s(static_cast<size_t>(N + 1), 0.0);
    bool changed = false;
    for (double x : qv) changed = changed || x != 1.0;
    for (double x : kv) changed = changed || x != 1.0;
    if (!changed) return {};
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r <= N; ++r) {
        double dot = 0;
        for (int64_t i = 0; i < dh; ++i)
          dot += qv[static_cast<size_t>(h * dh + i)] * kv[static_cast<size_t>((h * (N + 1) + r) * dh + i)];
        s[static_cast<size_t>(r)] += dot / static_cast<double>(dh * H);
      }
    return s;
  };
  std::vector<std::string> names = {pc.scheme};
  std::vector<std::vector<double>> curves = {scores(pe)};
  if (curves.front().empty()) return;
  const models::PEScheme& sch = models::pe_scheme(pc.scheme);
  const double factor = 4.0;
  const int64_t train_len = std::max<int64_t>(2, N / 4);
  if (!sch.variant_key.empty() && pe.parameters().empty()) {
    for (const models::PEKey* k : models::pe_keys()) {
      if (k->scheme != pc.scheme || k->name != sch.variant_key) continue;
      for (const std::string& choice : k->choices) {
        if (choice == k->def.s) continue;
        models::PEConfig v = pc;
        v.set(sch.variant_key, choice);
        v.set(sch.variant_factor_key, factor);
        v.train_positions = train_len;
        Generator gen(0);
        auto m = models::make_pe(v, si, gen);
        m->eval();
        names.push_back(choice);
        curves.push_back(scores(*m));
      }
    }
  }
  std::vector<std::string> score_names;
  for (const auto& n : names) score_names.push_back("score_" + n);
  series_files(p, stem, "distance", score_names, iota(N + 1), curves);
  std::string gp = terminal(1000, 600);
  gp += "set title " +
        gnuplot_quote(label + ": hook 2, score q'.k'/d_head of constant q = k against the distance" +
                      (names.size() > 1 ? "\n(variants: factor " + format_double(factor, 3) +
                                              ", training length " + std::to_string(train_len) +
                                              ", evaluation mode)"
                                        : std::string())) +
        "\n";
  gp += "set xlabel 'relative distance'\nset ylabel 'score / d_head'\nset grid\nset key top right\nplot ";
  for (size_t i = 0; i < names.size(); ++i)
    gp += std::string(i ? ", " : "") + gnuplot_quote(stem + ".dat") + " using 1:" +
          std::to_string(i + 2) + " with lines lw 1.5 title " + gnuplot_quote(names[i]);
  gp += "\n";
  p.plot(stem, gp);
}

// Every picture the hooks of one PE object give. P: positions for hooks 1 and 3; N: distances for
// hook 2. A scheme with a position limit gets at most that many positions.
void pe_pictures(Plotter& p, const std::string& stem, const std::string& label,
                 PositionalEncoding& pe, const models::PEConfig& pc, const StackInfo& si, int64_t P,
                 int64_t N, Device dev) {
  const int64_t limit = models::pe_max_positions(pc);
  if (limit > 0) P = std::min(P, limit), N = std::min(N, limit - 1);
  NoGradGuard ng;
  if (pe.additive()) embedding_picture(p, stem + "_embedding", label, pe, P, si.d_model, si.dtype, dev);
  if (!tables_picture(p, stem + "_tables", label, pe, si, P))
    bias_picture(p, stem + "_bias", label, pe, si, P, dev);
  if (N > 0) rotation_picture(p, stem + "_rotation", label, pe, pc, si, N, dev);
}

// ---------------- pictures from a run ----------------

// Refuses the attention maps of `source` + `target` positions (decoder-only: source 0) past
// --max-output-mb or the machine's memory, naming `what` sets the length: before anything is
// decoded or written (item 7 of issue 51: a 5000-digit input wrote 2.1 GB in 64 s).
void check_attention_maps(const Config& cfg, const PlotPeOptions& opt, int64_t source,
                          int64_t target, const std::string& what) {
  const double bytes = attention_maps_bytes(cfg, source, target);
  const std::string len = source > 0 ? std::to_string(source) + " source and " +
                                           std::to_string(target) + " target positions"
                                     : std::to_string(target) + " positions";
  const int64_t layers = cfg.model.arch == "seq2seq"
                             ? cfg.model.encoder_layers + 2 * cfg.model.decoder_layers
                             : cfg.model.decoder_layers;
  PELAB_CHECK(bytes <= opt.max_output_bytes, "plot-pe: ", what, ": the attention maps of ", len,
              " would write ", gigabytes(bytes), " (", count_text(layers, "map"), " x ",
              count_text(cfg.model.heads, "head"),
              " x queries x keys, a CSV row and a .dat number each), more than --max-output-mb ",
              format_double(opt.max_output_bytes / 1e6, 6),
              "; pass a shorter --input, or raise --max-output-mb");
  // In memory: every layer's probabilities (and a host copy of one), one map's text.
  const double dt = cfg.model.dtype == "float64" ? 8 : 4;
  const double need = bytes + bytes / kAttentionMapEntryBytes * (2 * dt + 8);
  const double have = machine_memory_bytes();
  PELAB_CHECK(have <= 0 || need <= have, "plot-pe: ", what, ": the attention maps of ", len,
              " need ", gigabytes(need), " of memory; this machine has ", gigabytes(have),
              ". Pass a shorter --input");
}

std::string token_label(const data::Vocab& v, int64_t id) {
  std::string s = v.symbol(id);
  if (s == "\n") return "\\n";
  if (s == " ") return "_";
  return s;
}

// Attention maps of one attention module's last call.
void attention_picture(Plotter& p, const std::string& stem, const std::string& title,
                       const Tensor& probs, const std::vector<std::string>& qtok,
                       const std::vector<std::string>& ktok) {
  PELAB_CHECK(probs.defined() && probs.dim() == 4, "plot-pe: no attention probabilities for ",
              stem);
  const int64_t H = probs.size(1), Lq = probs.size(2), Lk = probs.size(3);
  const std::vector<double> v = probs.to_vector();
  std::string csv = "head,query,key,query_token,key_token,probability\n", dat;
  for (int64_t h = 0; h < H; ++h) {
    dat += "# head " + std::to_string(h + 1) + "\n";
    for (int64_t i = 0; i < Lq; ++i) {
      for (int64_t j = 0; j < Lk; ++j) {
        const double x = v[static_cast<size_t>((h * Lq + i) * Lk + j)];
        csv += std::to_string(h + 1) + "," + std::to_string(i) + "," + std::to_string(j) + "," +
               csv_field(qtok[static_cast<size_t>(i)]) + "," + csv_field(ktok[static_cast<size_t>(j)]) + "," +
               num(x) + "\n";
        dat += (j ? " " : "") + num(x);
      }
      dat += "\n";
    }
    dat += "\n\n";
  }
  p.data(stem + ".csv", csv);
  p.data(stem + ".dat", dat);
  const int64_t cols = std::min<int64_t>(H, 4), rows = (H + cols - 1) / cols;
  const int cell = static_cast<int>(std::clamp<int64_t>(std::max(Lq, Lk) * 14, 260, 520));
  std::string gp = terminal(static_cast<int>(cols * cell + 80), static_cast<int>(rows * cell + 80));
  gp += kSequential + std::string("set cbrange [0:1]\n");
  auto tics = [](const std::vector<std::string>& t) {
    std::string s = "(";
    const size_t step = t.size() > 40 ? (t.size() + 39) / 40 : 1;
    bool first = true;
    for (size_t i = 0; i < t.size(); i += step) {
      s += std::string(first ? "" : ", ") + gnuplot_quote(t[i]) + " " + std::to_string(i);
      first = false;
    }
    return s + ")";
  };
  gp += "set xtics " + tics(ktok) + " rotate by 90 right font ',8'\n";
  gp += "set ytics " + tics(qtok) + " font ',8'\n";
  gp += "set xrange [-0.5:" + std::to_string(Lk) + "-0.5]\nset yrange [" + std::to_string(Lq) +
        "-0.5:-0.5]\n";
  gp += "set multiplot layout " + std::to_string(rows) + "," + std::to_string(cols) + " title " +
        gnuplot_quote(title) + "\n";
  for (int64_t h = 0; h < H; ++h) {
    gp += "set title 'head " + std::to_string(h + 1) + "'\n";
    gp += "plot " + gnuplot_quote(stem + ".dat") + " index " + std::to_string(h) +
          " matrix with image notitle\n";
  }
  gp += "unset multiplot\n";
  p.plot(stem, gp);
}

// The input the attention maps are drawn for: --input, else the first example of the run's
// longest test length (of the validation split without one; lm: the first validation window's
// first 48 tokens).
struct MapsInput {
  std::vector<int64_t> src;
  // The example whose position IDs the task gives (task.position_ids, task.index_hints), if any.
  const data::Example* task_ex = nullptr;
  std::string text;  // "input '...'" (picture titles)
  std::string what;  // which input sets the length (errors)
};

MapsInput maps_input(const Config& cfg, const TaskData& data, const std::string& input) {
  MapsInput in;
  std::string used = input;
  // Position IDs from the task (task.position_ids, task.index_hints: the example carries them) are
  // the positions the model was trained and evaluated on; 0..L-1 would draw another model's
  // attention. They come with the task's examples, so --input (a bare text) is refused then.
  if (!input.empty()) {
    PELAB_CHECK(cfg.task.position_ids == "sequential" && cfg.task.index_hints == 0,
                "plot-pe: --input cannot be used with a run whose task gives the positions "
                "(task.position_ids ", cfg.task.position_ids, ", task.index_hints ",
                cfg.task.index_hints, "): the IDs come with the task's examples; leave --input "
                "out to draw the first example of the run's longest test length");
    in.src = data.encode_line(input);
  } else if (!data.is_lm()) {
    const EvalSet* set = data.tests().empty() ? &data.valid() : &data.tests().back();
    PELAB_CHECK(!set->examples.empty(), "plot-pe: the run has no test examples; pass --input");
    in.src = set->examples.front().src;
    if (!set->examples.front().src_pos.empty()) in.task_ex = &set->examples.front();
    used = data.render(in.src);
  } else {
    const EvalSet& set = data.valid();
    PELAB_CHECK(!set.windows.empty(), "plot-pe: the run has no validation windows; pass --input");
    in.src = set.windows.front().input;
    if (in.src.size() > 48) in.src.resize(48);
    used = data.render(in.src);
  }
  PELAB_CHECK(!in.src.empty(), "plot-pe: --input is empty");
  in.text = "input '" + used + "'";
  in.what = input.empty() ? "the default input (" + std::to_string(in.src.size()) + " symbols)"
                          : "--input (" + std::to_string(in.src.size()) + " symbols)";
  return in;
}

// Every attention module keeps (or stops keeping) the probabilities of its last call.
void keep_attention_probs(models::Transformer& model, bool on) {
  if (model.encoder)
    for (size_t i = 0; i < model.encoder->layers->size(); ++i)
      model.encoder->layers->at<models::EncoderLayer>(i).self_attn->keep_probs = on;
  for (size_t i = 0; i < model.decoder->layers->size(); ++i) {
    auto& l = model.decoder->layers->at<models::DecoderLayer>(i);
    l.self_attn->keep_probs = on;
    if (l.cross_attn) l.cross_attn->keep_probs = on;
  }
}

// Encoder-decoder: the input is decoded greedily, then the maps of one teacher-forced pass over
// input and output: encoder self-attention, decoder self- and cross-attention per layer.
void seq2seq_attention_maps(Plotter& p, const Config& cfg, LoadedModel& lm,
                            const PlotPeOptions& opt, const MapsInput& in) {
  models::Transformer& model = *lm.model;
  const data::Vocab& vocab = lm.data->vocab();
  const int64_t max_pos = models::pe_max_positions(cfg.model.pe);  // 0 = no limit
  const Device dev = model.parameters().front().device();
  PELAB_CHECK(max_pos <= 0 || static_cast<int64_t>(in.src.size()) + 1 <= max_pos,
              "plot-pe: the input needs ", in.src.size() + 1, " positions > ",
              models::pe_max_positions_name(cfg.model.pe), " ", max_pos);
  data::Seq2SeqBatch b = data::make_seq2seq_batch({data::Example{in.src, {}, {}, {}}});
  check_attention_maps(cfg, opt, b.S, 1, in.what);  // the source's maps, before decoding
  Tensor s = ids_tensor(b.src, b.B, b.S, dev), sm = mask_tensor(b.src_mask, b.B, b.S, dev);
  int64_t budget = decode_budget(cfg, static_cast<int64_t>(in.src.size()));
  if (max_pos > 0) budget = std::min<int64_t>(budget, max_pos - 1);
  models::GreedyResult g = models::greedy_decode(model, s, sm, budget);
  std::vector<int64_t> tgt_in = {data::Vocab::kBos};
  for (int64_t t : g.tokens[0]) tgt_in.push_back(t);
  std::vector<std::string> stok, ttok;
  for (int64_t id : b.src) stok.push_back(token_label(vocab, id));
  for (int64_t id : tgt_in) ttok.push_back(token_label(vocab, id));
  check_attention_maps(cfg, opt, b.S, static_cast<int64_t>(tgt_in.size()), in.what);
  keep_attention_probs(model, true);
  (void)model.forward_seq2seq(
      s, sm, ids_tensor(tgt_in, 1, static_cast<int64_t>(tgt_in.size()), dev), Tensor());
  keep_attention_probs(model, false);
  const std::string out_text = lm.data->render(g.tokens[0]);
  for (size_t i = 0; i < model.encoder->layers->size(); ++i)
    attention_picture(p, "attention_encoder_self_layer" + std::to_string(i),
                      "encoder self-attention, layer " + std::to_string(i) + " (" +
                          cfg.model.pe.scheme + "; " + in.text + ")",
                      model.encoder->layers->at<models::EncoderLayer>(i).self_attn->last_probs,
                      stok, stok);
  for (size_t i = 0; i < model.decoder->layers->size(); ++i) {
    auto& l = model.decoder->layers->at<models::DecoderLayer>(i);
    attention_picture(p, "attention_decoder_self_layer" + std::to_string(i),
                      "decoder self-attention, layer " + std::to_string(i) + " (" +
                          cfg.model.pe.scheme + "; output '" + out_text + "')",
                      l.self_attn->last_probs, ttok, ttok);
    attention_picture(p, "attention_decoder_cross_layer" + std::to_string(i),
                      "cross-attention, layer " + std::to_string(i) + " (" + cfg.model.pe.scheme +
                          "; " + in.text + " -> '" + out_text + "')",
                      l.cross_attn->last_probs, ttok, stok);
  }
}

// Decoder-only: the prompt is decoded greedily (not for lm), then the self-attention maps of
// one pass over prompt and output, at the task's position IDs when it gives them.
void decoder_attention_maps(Plotter& p, const Config& cfg, LoadedModel& lm,
                            const PlotPeOptions& opt, const MapsInput& in) {
  models::Transformer& model = *lm.model;
  const TaskData& data = *lm.data;
  const int64_t max_pos = models::pe_max_positions(cfg.model.pe);  // 0 = no limit
  const std::string max_pos_name = models::pe_max_positions_name(cfg.model.pe);
  std::vector<int64_t> seq = data.is_lm() ? in.src : data::decoder_prompt(in.src);
  check_attention_maps(cfg, opt, 0, static_cast<int64_t>(seq.size()), in.what);  // before decoding
  std::string out_text;
  if (!data.is_lm()) {
    int64_t budget = decode_budget(cfg, static_cast<int64_t>(in.src.size()));
    if (max_pos > 0)
      budget = std::min<int64_t>(budget, max_pos - static_cast<int64_t>(seq.size()));
    PELAB_CHECK(budget > 0, "plot-pe: the input is too long for ", max_pos_name, " ",
                max_pos);
    models::GreedyPositions gp;
    if (in.task_ex) {
      budget = static_cast<int64_t>(in.task_ex->tgt.size()) + 1;  // the answer and its eos
      gp.tgt = example_task_positions(*in.task_ex, budget);
    }
    models::GreedyResult g = models::greedy_decode(model, {seq}, budget, true, {},
                                                   in.task_ex ? &gp : nullptr);
    for (int64_t t : g.tokens[0]) seq.push_back(t);
    out_text = data.render(g.tokens[0]);
  }
  PELAB_CHECK(max_pos <= 0 || in.task_ex || static_cast<int64_t>(seq.size()) <= max_pos,
              "plot-pe: the sequence needs ", seq.size(), " positions > ", max_pos_name, " ",
              max_pos);
  std::vector<std::string> ttok;
  for (int64_t id : seq) ttok.push_back(token_label(data.vocab(), id));
  check_attention_maps(cfg, opt, 0, static_cast<int64_t>(seq.size()), in.what);
  keep_attention_probs(model, true);
  {
    models::Positions pos;
    if (in.task_ex) {
      pos = example_task_positions(*in.task_ex, static_cast<int64_t>(seq.size()) -
                                                    static_cast<int64_t>(in.task_ex->src_pos.size()));
    }
    const Device dev = model.parameters().front().device();
    (void)model.forward_decoder(ids_tensor(seq, 1, static_cast<int64_t>(seq.size()), dev), Tensor(),
                                in.task_ex ? &pos : nullptr);
  }
  keep_attention_probs(model, false);
  for (size_t i = 0; i < model.decoder->layers->size(); ++i)
    attention_picture(p, "attention_decoder_self_layer" + std::to_string(i),
                      "decoder self-attention, layer " + std::to_string(i) + " (" + cfg.model.pe.scheme +
                          "; " + in.text + (out_text.empty() ? "" : " -> '" + out_text + "'") + ")",
                      model.decoder->layers->at<models::DecoderLayer>(i).self_attn->last_probs,
                      ttok, ttok);
}

void attention_maps(Plotter& p, const Config& cfg, LoadedModel& lm, const PlotPeOptions& opt) {
  const MapsInput in = maps_input(cfg, *lm.data, opt.input);
  NoGradGuard ng;
  lm.model->eval();
  if (lm.model->is_seq2seq())
    seq2seq_attention_maps(p, cfg, lm, opt, in);
  else
    decoder_attention_maps(p, cfg, lm, opt, in);
}

// The length of the attention maps' input from the config alone, before anything is built: a
// --input's symbols (at most its non-space characters), else the default example's (the first
// example of the last test length, or of the validation split; lm: 48 tokens); 0 = unknown (a
// text file's examples). Only the prompt: the decoded part is checked once decoded.
std::pair<int64_t, std::string> maps_input_length(const Config& cfg, const std::string& input) {
  const TaskConfig& t = cfg.task;
  if (!input.empty()) {
    int64_t n = 0;
    for (char c : input) n += !std::isspace(static_cast<unsigned char>(c));
    return {n, "--input (" + std::to_string(n) + " characters)"};
  }
  if (t.name == "lm") return {std::min<int64_t>(48, t.lm_train_len), "the default input"};
  if (t.name == "textfile") return {0, ""};
  const int64_t L = t.test_lengths.empty() ? t.train_max_len : t.test_lengths.back();
  try {
    return {data::make_task(task_spec(cfg))->max_source_len(L),
            "the default input (the first example of test length " + std::to_string(L) +
                "; pass a shorter --input)"};
  } catch (const data::DataError&) {
    return {0, ""};  // the task's own error comes when the data is built
  }
}

}  // namespace

double attention_maps_bytes(const Config& cfg, int64_t source, int64_t target) {
  const double S = static_cast<double>(source), T = static_cast<double>(target);
  const double maps = cfg.model.arch == "seq2seq"
                          ? cfg.model.encoder_layers * S * S + cfg.model.decoder_layers * (T * T + T * S)
                          : cfg.model.decoder_layers * T * T;
  return maps * static_cast<double>(cfg.model.heads) * kAttentionMapEntryBytes;
}

PlotPeResult plot_pe(const PlotPeOptions& opt) {
  PlotPeResult res;
  Plotter p(opt, res);
  Config cfg;
  bool have_run = !opt.run.empty();
  if (have_run) {
    PELAB_CHECK(is_run_directory(opt.run), "plot-pe: --run ", opt.run,
                " is not a run directory (no config.yaml)");
    cfg = load_config((fs::path(opt.run) / "config.yaml").string());
  }
  PELAB_CHECK(!opt.run_only || have_run, "plot-pe: --run-only needs --run RUN_DIR");
  if (!opt.run_only) {
    // Every registered scheme without trained parameters, from its definition (a scheme with
    // parameters is drawn from a trained run: --run).
    for (const std::string& name : models::pe_names()) {
      models::PEConfig pc;
      pc.scheme = name;
      StackInfo si;
      si.kind = StackKind::Decoder;
      si.d_model = opt.d_model;
      si.heads = opt.heads;
      si.dtype = DType::Float64;
      Generator gen(0);
      auto pe = models::make_pe(pc, si, gen);
      if (!pe->parameters().empty()) continue;
      pe->eval();
      pe_pictures(p, name, name + " (definition, d_model " + std::to_string(opt.d_model) + ")", *pe,
                  pc, si, opt.positions, 0, Device::cpu());
      StackInfo rot = si;  // hook 2 with one head of opt.rotation_dims dims
      rot.d_model = opt.rotation_dims;
      rot.heads = 1;
      auto pe1 = models::make_pe(pc, rot, gen);
      pe1->eval();
      NoGradGuard ng;
      rotation_picture(p, name + "_rotation", name + " (definition, d_head " + std::to_string(opt.rotation_dims) + ")",
                       *pe1, pc, rot, opt.distance, Device::cpu());
    }
  }
  if (!have_run) {
    PELAB_CHECK(opt.input.empty(), "plot-pe: --input needs --run RUN_DIR (a trained run)");
    return res;
  }
  set_num_threads(cfg.train.threads);
  const std::string ck = opt.checkpoint.empty() ? latest_checkpoint(opt.run) : opt.checkpoint;
  PELAB_CHECK(!ck.empty(), "plot-pe: no checkpoint in ", opt.run, "/checkpoints");
  {
    // The attention maps' input, bounded before the run's data and model are built.
    const auto [n, what] = maps_input_length(cfg, opt.input);
    if (n > 0) {
      if (cfg.model.arch == "seq2seq")
        check_attention_maps(cfg, opt, n + 1, 1, what);
      else
        check_attention_maps(cfg, opt, 0, cfg.task.name == "lm" ? n : n + 2, what);
    }
  }
  LoadedModel lm = load_model(cfg, ck);
  const std::vector<NamedTensor> ps = lm.model->named_parameters();
  {
    // The run's own PE objects, per stack, through the same hooks.
    models::Transformer& model = *lm.model;
    const Device dev = model.parameters().front().device();
    model.eval();
    const int64_t P = std::max<int64_t>(2 * lm.train_positions, 64), N = 4 * lm.train_positions;
    models::PEConfig pc = cfg.model.pe;
    pc.train_positions = lm.train_positions;
    auto stack = [&](const char* name, StackKind kind, PositionalEncoding& pe, int64_t layers) {
      StackInfo si;
      si.kind = kind;
      si.layers = layers;
      si.d_model = cfg.model.d_model;
      si.heads = cfg.model.heads;
      si.dtype = model.dtype();
      pe_pictures(p, pc.scheme + "_" + name, pc.scheme + ", " + name + " of the run", pe, pc, si, P, N,
                  dev);
    };
    if (model.encoder)
      stack("encoder", StackKind::Encoder, *model.encoder->pe,
            static_cast<int64_t>(model.encoder->layers->size()));
    stack("decoder", StackKind::Decoder, *model.decoder->pe,
          static_cast<int64_t>(model.decoder->layers->size()));
  }
  attention_maps(p, cfg, lm, opt);
  return res;
}

namespace {

const char* kPlotPeHelp =
    "usage: pelab plot-pe [--out DIR] [--run RUN_DIR [--input TEXT] [--checkpoint PATH]\n"
    "                     [--run-only] [--max-output-mb MB]] [--no-plots]\n"
    "\n"
    "Draws the positional encodings through their modules' own hooks, each as a PNG (gnuplot)\n"
    "plus the CSV behind it: what hook 1 adds to the embedding (table, cosine similarity of\n"
    "positions), the score term hook 3 adds per head against key - query (or its relative\n"
    "tables), and the score of constant q = k through hook 2 against the distance (with the\n"
    "scheme's eval-time variants, e.g. RoPE pi/ntk/yarn). Without --run: every scheme without\n"
    "trained parameters, from its definition. With --run RUN_DIR (a trained run): the run's\n"
    "encoder and decoder PE objects the same way, and attention maps per layer and head for\n"
    "--input TEXT (default: the first example of the run's longest test length).\n"
    "\n"
    "options:\n"
    "  --out DIR          output directory (default reports/pe)\n"
    "  --run RUN_DIR      a trained run directory\n"
    "  --input TEXT       source for the attention maps, written like the task's data (e.g. "
    "31415)\n"
    "  --checkpoint PATH  checkpoint of the run (default: its newest)\n"
    "  --run-only         with --run: only the pictures of the run (skip the scheme pictures)\n"
    "  --max-output-mb MB the most the attention maps may write (default 256; they grow with\n"
    "                     the square of the input's length)\n"
    "  --no-plots         only write the CSV / .dat files\n"
    "  -h, --help         show this help\n";

const CommandSpec kPlotPeSpec{
    "plot-pe", {"--out", "--run", "--input", "--checkpoint", "--max-output-mb"},
    {"--no-plots", "--run-only"}, false};

}  // namespace

int plot_pe_cli(const std::vector<std::string>& a, std::ostream& out, std::ostream& err) {
  PlotPeOptions opt;
  try {
    const CommandLine args = parse_command_line(kPlotPeSpec, a);
    if (args.help) {
      out << kPlotPeHelp;
      return 0;
    }
    args.expect_positional(0, "");
    opt.out = args.value("--out", opt.out);
    opt.run = args.value("--run");
    opt.input = args.value("--input");
    opt.checkpoint = args.value("--checkpoint");
    opt.plots = !args.has("--no-plots");
    opt.run_only = args.has("--run-only");
    opt.max_output_bytes = static_cast<double>(args.integer("--max-output-mb", 1, 256)) * 1e6;
    if ((!opt.input.empty() || opt.run_only) && opt.run.empty())
      throw args.error(std::string(opt.run_only ? "--run-only" : "--input") +
                       " needs --run RUN_DIR");
  } catch (const UsageError& e) {
    return report_usage_error(err, e);
  }
  const PlotPeResult r = plot_pe(opt);
  out << "plot-pe: " << r.pngs.size() << " PNG plots and " << r.csvs.size() << " data files in "
      << opt.out << "\n";
  if (!r.note.empty()) out << "plot-pe: " << r.note << "\n";
  PELAB_CHECK(r.failed.empty(), "plot-pe: gnuplot could not draw ", r.failed.size(), " of ",
              r.failed.size() + r.pngs.size(), " plots: ", join(r.failed, "; "));
  return 0;
}

}  // namespace pelab
