"""The physics both workloads share: FLOPs of a model, GEMM and memory-bound kernel time on a GPU
(roofline), and collective time on the link a group crosses.  Pure functions; ``training/`` and
``serving/`` compose them into their estimators."""
