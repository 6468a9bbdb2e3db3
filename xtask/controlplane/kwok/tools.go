//go:build tools

// Package tools pins kwok, which `cargo xtask bench-kwok` runs to keep fake
// Nodes heart-beating and to move their Pods to Running.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
