"""Rebalancing: Jet's weak and strong rebalancers on the GPU (their CPU twins are
rounds of the CPU Jet loop in :mod:`procmap.kernels.refinement.jet_cpu`) and the exact
per-block limits of rank placement (``limits_cpu``)."""
