"""The gpubench collector: a gRPC service over DuckDB that stores runs and compares GPUs."""
