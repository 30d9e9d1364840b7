"""Rebalancing: Jet's weak and strong rebalancers, the CPU twin (``rebalance_cpu``,
run by the CPU Jet loop of :mod:`procmap.kernels.refinement.jet_cpu` as its
rebalancing rounds) and the GPU twin (``rebalance_gpu``), and the exact per-block
limits of rank placement (``limits_cpu``)."""
