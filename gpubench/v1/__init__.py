"""Wire code generated from protos/gpubench/v1 by `make proto` (not committed)."""
