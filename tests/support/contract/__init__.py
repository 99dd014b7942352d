"""The contract tests' layout of a model repository, their two clients and helpers (real TF Serving or the embedded server)."""
