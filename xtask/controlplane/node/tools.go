//go:build tools

// Package tools pins the node commands that `cargo xtask cluster` builds, from the same
// Kubernetes release as the control plane.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
