//go:build tools

// Package exporter pins Prometheus's memcached exporter, which
// ../prometheus_exporter.sh builds and points at the server.
package exporter

import _ "github.com/prometheus/memcached_exporter/cmd/memcached_exporter"
