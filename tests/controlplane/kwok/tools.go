//go:build tools

// Package tools records the kwok controller build.sh compiles, so that
// `go mod tidy` keeps its dependencies (at the versions kwok's own go.mod
// requires) in go.mod/go.sum. kwok is its own module: its Kubernetes client
// libraries need not match the kube-apiserver module one directory up.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
