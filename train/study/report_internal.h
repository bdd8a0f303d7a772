// pelab — declarations shared by the report's files and by none else: report.cpp (write_report),
// report_csv.cpp, report_stats.cpp, report_tables.cpp, report_plots.cpp. The public interface
// is report.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/study/report.h"

namespace pelab::report_detail {

// A number for CSV: exact (17 digits), "" when not finite.
inline std::string num_cell(double v) { return csv_number(v); }

// A text cell: csv_field (train/metrics.h), formulas neutralised.
inline std::string csv_cell(const std::string& s) { return csv_field(s); }

// Metrics (report_stats.cpp): accuracies are shown in percent and higher is better for them.
bool is_percent_metric(const std::string& m);
bool higher_better(const std::string& m);
std::string metric_title(const std::string& m);  // "exact match (%)", "perplexity", ...

// Rows and columns of the tables (report_tables.cpp).
// Whether compare.unconverged: exclude applies to `label` (never to a scheme that cannot learn).
bool excludes(const ReportInput& in, const std::string& label);
std::string scheme_of(const ReportInput& in, const std::string& label);
// Splits in column order: by length when every split has one, else by first appearance.
struct Column {
  std::string split;
  int64_t length = 0;
  int in_distribution = -1;
};
std::vector<Column> columns_of(const std::vector<ResultRow>& rows);
// table_<metric>.csv: the metric table as CSV.
std::string summary_csv(const ReportInput& in, const std::string& metric,
                        const std::vector<Column>& cols);

// The plots (report_plots.cpp): the files written and gnuplot's errors.
struct PlotResult {
  std::vector<std::string> pngs, data;
  std::string error;
};
// <metric>_vs_length.{dat,csv,png}; the PNG only with make_png.
void plot_metric(const std::string& dir, const ReportInput& in, const std::string& metric,
                 const std::vector<Column>& cols, PlotResult& pr, bool make_png);
// train_loss.{dat,csv,png}; the PNG only with make_png.
void plot_loss(const std::string& dir, const ReportInput& in, PlotResult& pr, bool make_png);

}  // namespace pelab::report_detail
