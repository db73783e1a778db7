//! Shared fixtures for the benchmarks (see BENCHMARKS.md).
