// `paseo-sandbox-admin metrics`: the operator socket's answer (schema/operator.capnp) in the
// Prometheus text exposition format (version 0.0.4), for node_exporter's textfile collector or
// any scraper. Every sandbox of every deployment, the service's use against its bounds, and
// its health. Names: paseo_sandbox_sandbox_* per sandbox (labels sandbox, deployment),
// paseo_sandbox_service_* for all sandboxes together, paseo_sandbox_* for the rest.
//
//   std::string text = PrometheusText(results);   // a live service
//   std::string down = PrometheusDown();   // paseo_sandbox_up 0
#pragma once

#include <string>

#include "absl/status/status.h"
#include "schema/operator.capnp.h"

namespace paseo::admin {

std::string PrometheusText(operator_api::Operator::MetricsResults::Reader metrics);
// What is written when the service cannot be asked: paseo_sandbox_up 0 alone, so an alert on
// it fires rather than a file going stale.
std::string PrometheusDown();

// Writes `text` to <dir>/paseo_sandbox.prom through a temporary file in `dir` renamed into
// place (0644), so a collector never reads half a file.
absl::Status WriteTextfile(const std::string& dir, const std::string& text);

}  // namespace paseo::admin
