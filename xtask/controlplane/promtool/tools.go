//go:build tools

// Package tools pins Prometheus, whose promtool the chart tests build to check the monitoring
// pack's alerting rules (`promtool test rules`).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
