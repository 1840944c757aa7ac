module inference-cache/benchmarks/floor

go 1.22
