//go:build tools

// Package tools pins kustomize, which `cargo xtask dist` builds to render deploy/.
package tools

import (
	_ "sigs.k8s.io/kustomize/kustomize/v5"
)
