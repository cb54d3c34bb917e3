"""Palimpsest beside other memory backends, on the same data, questions and embedder in one run."""
