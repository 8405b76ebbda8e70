"""Development tools: the local cluster, the benchmark, the CRD generator and the
layering check. Run them from the repository root as `python -m hack.<tool>`."""
