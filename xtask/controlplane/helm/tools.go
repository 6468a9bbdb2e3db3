//go:build tools

// Package tools pins helm, which `cargo xtask cluster` and the chart tests build to lint,
// render, install and uninstall deploy/chart.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
